"""InfoNCE fine-tuning of any encoder into a sentence embedder, and its export as a sentence-transformers
directory: typed recipe settings, the loss, the homogeneous batch sampler, the trainer and the export."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "settings": ["ContrastiveSettings"],
        "train": ["run_contrastive"],
        "result": ["ContrastiveResult", "SetScores", "relative_change"],
    },
)
