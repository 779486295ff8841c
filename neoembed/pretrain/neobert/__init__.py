"""The NeoBERT backbone: config, modeling, attention backends, RoPE, FLOP accounting and its tokenizer.

`config.py`, `modeling.py`, `attention.py` and `rope.py` import only each other, so an export can carry them
as remote code (`trust_remote_code=True` where neoembed is not installed).
"""

from typing import TYPE_CHECKING

from neoembed.faces import attach_face

if TYPE_CHECKING:  # the public names, written once; attach_face loads each on first use
    from .attention import (
        available_backends as available_backends,
        choose_backend as choose_backend,
        importable_kernels as importable_kernels,
        varlen_kernel_for as varlen_kernel_for,
    )
    from .auto import (
        register_auto_classes as register_auto_classes,
        register_auto_classes_on_load as register_auto_classes_on_load,
    )
    from .config import (
        NeoBERTConfig as NeoBERTConfig,
        tiny_config as tiny_config,
    )
    from .flops import (
        device_peak as device_peak,
        device_peak_flops as device_peak_flops,
        forward_flops as forward_flops,
        known_peak_tflops as known_peak_tflops,
        measured_matmul_flops as measured_matmul_flops,
        training_flops as training_flops,
    )
    from .modeling import (
        NeoBERTForMaskedLM as NeoBERTForMaskedLM,
        NeoBERTForSequenceClassification as NeoBERTForSequenceClassification,
        NeoBERTModel as NeoBERTModel,
        NeoBERTPreTrainedModel as NeoBERTPreTrainedModel,
    )
    from .tokenizer import load_tokenizer as load_tokenizer

__getattr__, __dir__, __all__ = attach_face(__name__, __file__)
