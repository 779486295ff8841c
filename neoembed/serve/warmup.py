"""The batches the server runs before it reports ready, and how far it has got through them (/health says).

Every server runs one short input first (the first forward allocates) and last a full batch, which
`SupervisedProcess.calibrate` times to set the batch deadline. A compiled model compiles on these batches:
torch.compile specialises its graphs to a batch of one sequence and compiles one dynamic-shape graph for all
the others, so one short input and one batch of several inputs of unequal lengths compile every graph a
request can need (tests/test_compilation.py counts them over many batch shapes). A compiled model warms up
after the port is bound, while /health answers 503 `warming`; an eager one warms up in a moment before the
port is bound, as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from neoembed.serve.budget import filled_batch, repeated_input
from neoembed.serve.worker import ModelInfo

Batch = list[list[int]]  # token-id sequences


@dataclass
class WarmUp:
    """The warm-up batches, the last the full one that calibrates, and how many have run."""

    batches: list[Batch]
    done: int = field(default=0)

    @property
    def finished(self) -> bool:
        return self.done == len(self.batches)

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
