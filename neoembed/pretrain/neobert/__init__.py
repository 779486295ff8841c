"""The NeoBERT backbone: config, modeling, attention backends, RoPE, FLOP accounting and its tokenizer.

`config.py`, `modeling.py`, `attention.py` and `rope.py` import only each other, so an export can carry them
as remote code (`trust_remote_code=True` where neoembed is not installed).
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "config": ["NeoBERTConfig", "tiny_config"],
        "modeling": [
            "NeoBERTForMaskedLM",
            "NeoBERTForSequenceClassification",
            "NeoBERTModel",
            "NeoBERTPreTrainedModel",
        ],
        "auto": ["register_auto_classes", "register_auto_classes_on_load"],
        "attention": ["available_backends", "choose_backend", "importable_kernels", "varlen_kernel_for"],
        "flops": [
            "device_peak",
            "device_peak_flops",
            "forward_flops",
            "known_peak_tflops",
            "measured_matmul_flops",
            "training_flops",
        ],
        "tokenizer": ["load_tokenizer"],
    },
)
