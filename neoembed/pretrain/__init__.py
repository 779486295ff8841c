"""MLM pretraining of NeoBERT: corpus, masked batches (packed or padded), schedule, settings and the Trainer.

The backbone it trains is `neoembed.pretrain.neobert`; other packages import the backbone from there.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "settings": ["PretrainSettings"],
        "train": ["run_pretraining"],
        "batches": ["MLMBatches", "batch_counts", "packed_to_padded", "padded_width"],
    },
)
