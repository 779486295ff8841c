"""Throughput and quality benchmarks behind `neoembed bench`: one module per bench, each with `run(settings)`
over its settings in `settings`."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submodules=[
        "backends",
        "build_data",
        "contrastive",
        "encode",
        "gpu",
        "gpu_docs",
        "gpu_stages",
        "index",
        "mteb",
        "openai_clients",
        "pretrain",
        "scale",
        "serve",
    ],
    submod_attrs={
        "report": ["Report", "Table", "WrittenReport", "write_report"],
        "settings": [
            "BuildDataBench",
            "ContrastiveBench",
            "EncodeBench",
            "GpuBench",
            "IndexBench",
            "MtebBench",
            "OpenaiBench",
            "PretrainBench",
            "ScaleBench",
            "ServeBench",
        ],
    },
)
