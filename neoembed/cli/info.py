"""`neoembed info`: versions, compute device, and the attention backends that can run here."""

import os
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


def _cpu_name() -> str:
    import platform
    from pathlib import Path

    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or "unknown"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")


def info() -> None:
    """Print package versions, the compute device, and which attention backends are available."""
    import platform

    import torch
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from neoembed.precision import CPU_BF16_ENV, resolve_precision
    from neoembed.pretrain.neobert import available_backends

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
    bf16 = str(resolve_precision().bf16_supported)
    if os.environ.get(CPU_BF16_ENV) is not None:
        bf16 += f" (set by {CPU_BF16_ENV})"
    device.add_row("bf16 hardware", bf16)
    device.add_row("cpu", _cpu_name())
    device.add_row("cpu capability", torch.backends.cpu.get_cpu_capability())
    device.add_row("torch threads", str(torch.get_num_threads()))
    console.print(device)

    backends = Table("attention backend", "status", title="Attention backends")
    for name, status in available_backends().items():
        backends.add_row(name, escape(status))
    console.print(backends)
