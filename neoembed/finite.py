"""Vectors are finite or refused: the one check every path that produces embeddings runs.

A NaN or infinite component (a damaged weight, an overflow in a lower precision) makes a vector that finds
nothing and is found by nothing, and NaN is not valid JSON. Every producer (serve, `encode`, `index build/add`,
`export`, `mteb-eval`) calls `require_finite` on what it is about to hand on, and stops with one line naming
the first rows at fault instead.
"""

from __future__ import annotations

import numpy as np

from neoembed.errors import RunError

SHOWN_ROWS = 5  # rows named in the message; the count says how many more


class NonFiniteVectors(RunError):
    """Some embeddings hold NaN or infinite components; `rows` are their positions in the batch given."""

    def __init__(self, rows: list[int], what: str):
        self.rows = rows
        shown = ", ".join(str(row) for row in rows[:SHOWN_ROWS])
        more = f" and {len(rows) - SHOWN_ROWS} more" if len(rows) > SHOWN_ROWS else ""
        super().__init__(
            f"{what}: the model gave non-finite vectors (NaN or infinity) for row{'s' if len(rows) > 1 else ''} "
            f"{shown}{more}; its weights may be damaged, or its precision too low for these inputs"
        )


def non_finite_rows(vectors) -> list[int]:
    """Positions of the rows of a 2-D array (numpy or torch) with any NaN or infinite component."""
    array = vectors.detach().cpu().float().numpy() if hasattr(vectors, "detach") else np.asarray(vectors)
    if array.ndim == 1:
        array = array[None, :]
    return np.flatnonzero(~np.isfinite(array).all(axis=1)).tolist()


def require_finite(vectors, *, what: str, first_row: int = 0):
    """`vectors` unchanged when every component is finite; else `NonFiniteVectors` naming the rows (offset by
    `first_row`, so a batch of a larger input names the input's rows). `what` names the input or command."""
    rows = non_finite_rows(vectors)
    if rows:
        raise NonFiniteVectors([first_row + row for row in rows], what)
    return vectors
