"""`neoembed info`: versions, compute device, and the attention backends that can run here."""

from importlib import metadata

PACKAGES = (
    "neoembed",
    "torch",
    "transformers",
    "sentence-transformers",
    "datasets",
    "mteb",
    "faiss-cpu",
    "peft",
    "typer",
    "fastapi",
    "uvicorn",
    "flash-attn",
    "deepspeed",
)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def info() -> None:
    """Print package versions, the compute device, and which attention backends are available."""
    import platform

    import torch
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from neoembed.precision import resolve_precision
    from neoembed.pretrain.attention import available_backends

    console = Console()
    versions = Table("package", "version", title="Versions")
    versions.add_row("python", platform.python_version())
    for package in PACKAGES:
        versions.add_row(package, _version(package))
    console.print(versions)

    device = Table("item", "value", title="Device")
    if torch.cuda.is_available():
        device.add_row("device", f"cuda: {torch.cuda.get_device_name()}")
    else:
        device.add_row("device", "cpu (no CUDA device)")
    device.add_row("bf16 hardware", str(resolve_precision().bf16_supported))
    device.add_row("cpu capability", torch.backends.cpu.get_cpu_capability())
    device.add_row("torch threads", str(torch.get_num_threads()))
    console.print(device)

    backends = Table("attention backend", "status", title="Attention backends")
    for name, status in available_backends().items():
        backends.add_row(name, escape(status))
    console.print(backends)
