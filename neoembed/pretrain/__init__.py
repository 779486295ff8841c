"""MLM pretraining of NeoBERT: corpus, masked batches (packed or padded), schedule, settings and the Trainer.

The backbone it trains is `neoembed.pretrain.neobert`; other packages import the backbone from there.
"""

from typing import TYPE_CHECKING

from neoembed.faces import attach_face

if TYPE_CHECKING:  # the public names, written once; attach_face loads each on first use
    from .batches import (
        MLMBatches as MLMBatches,
        batch_counts as batch_counts,
        packed_to_padded as packed_to_padded,
        padded_width as padded_width,
    )
    from .settings import PretrainSettings as PretrainSettings
    from .train import run_pretraining as run_pretraining

__getattr__, __dir__, __all__ = attach_face(__name__, __file__)
