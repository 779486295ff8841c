"""MFU as a figure that can be trusted: achieved FLOP/s over the peak, where anything above 100% is reported as
a measurement error (a peak measured while another job ran, a wrong FLOP count), never as a result."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mfu:
    achieved: float  # FLOP/s
    peak: float  # FLOP/s

    @property
    def ratio(self) -> float:
        return self.achieved / self.peak

    @property
    def possible(self) -> bool:
        return self.ratio <= 1.0

    @property
    def figure(self) -> float | None:
        """The ratio, or None where it is impossible (the JSON keeps no impossible MFU)."""
        return self.ratio if self.possible else None

    def text(self) -> str:
        if self.possible:
            return f"{self.ratio:.1%}"
        return f"measurement error ({self.ratio:.1%} of the peak is above 100%)"
