"""The contrastive losses by kind: `loss.kind` in a recipe names one, and the trainer builds and calls it
through `ContrastiveLoss` (`losses.base`) without knowing which it trains.

A kind maps to the loss class as "module:Class", imported on first use: the settings check a recipe's kind
against this table without loading torch (`neoembed contrastive --help` stays cheap). A loss outside the
package is registered the same way, before the recipe is validated:

    LOSSES["margin"] = "my_package.losses:MarginInfoNCELoss"
"""

from __future__ import annotations

import importlib
from typing import Any

LOSSES: dict[str, str] = {
    "infonce": "neoembed.contrastive.losses.infonce:InfoNCELoss",
    "distill": "neoembed.contrastive.losses.distill:DistillationLoss",
}


def check_kind(kind: str) -> str:
    """`kind`, if a loss of that kind is registered; else a ValueError listing the kinds there are."""
    if kind not in LOSSES:
        raise ValueError(f"unknown loss kind {kind!r}; the kinds are {', '.join(LOSSES)}")
    return kind


def loss_class(kind: str) -> type[Any]:
    """The loss class registered as `kind`, a `losses.base.ContrastiveLoss` (not imported here: the settings
    import this table, and the losses the settings)."""
    module, _, name = LOSSES[check_kind(kind)].partition(":")
    return getattr(importlib.import_module(module), name)
