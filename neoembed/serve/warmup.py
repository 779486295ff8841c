"""What the server does before it reports ready, and how far it has got (/health says).

On a GPU whose budget was not given, the first step is the budget sweep (budget.py), since the warm-up batches
depend on the budget it chooses. Every server then runs one short input (the first forward allocates) and last
a full batch, which `SupervisedProcess.calibrate` times to set the batch deadline. A compiled model compiles on
these batches: torch.compile specialises its graphs to a batch of one sequence and compiles one dynamic-shape
graph for all the others, so one short input and one batch of several inputs of unequal lengths compile every
graph a request can need (tests/test_compilation.py counts them over many batch shapes). A sweep or a compiled
model runs after the port is bound, while /health answers 503 `warming`; an eager model with a known budget
warms up in a moment before the port is bound, as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from neoembed.serve.budget import filled_batch, repeated_input
from neoembed.serve.worker import ModelInfo

Batch = list[list[int]]  # token-id sequences


@dataclass
class WarmUp:
    """The budgets the sweep times (none where the budget is known), then the warm-up batches (known once the
    budget is, the last the full one that calibrates), and how many of each have run."""

    budgets: int = 0
    timed: int = 0
    batches: list[Batch] = field(default_factory=list)
    done: int = 0

    @property
    def sweeping(self) -> bool:
        """The budget is still being timed: the warm-up batches are not known yet."""
        return not self.batches

    @property
    def finished(self) -> bool:
        return not self.sweeping and self.done == len(self.batches)

    @property
    def progress(self) -> str:
        if self.sweeping:
            return f"timing batch budgets: {self.timed} of {self.budgets}"
        return f"{self.done} of {len(self.batches)} warm-up batches run"

    def count_timed(self) -> None:
        """One more budget timed (the sweep's `on_timed`)."""
        self.timed += 1

    @property
    def untimed(self) -> list[Batch]:
        """The batches before the calibrating one: what a replacement inference process runs before serving."""
        return self.batches[:-1]


def warm_up_batches(model: ModelInfo, budget: int) -> list[Batch]:
    """One short input; for a compiled model also several inputs of unequal lengths; then the full batch."""
    several = [repeated_input(model, length) for length in (3, 5, 9)]
    return [several[:1], *([several] if model.compiled else []), full_batch(model, budget)]


def full_batch(model: ModelInfo, budget: int) -> Batch:
    """A batch that fills the token budget with full-length inputs: what `SupervisedProcess.calibrate` times."""
    return filled_batch(model, budget, min(model.max_length, budget))
