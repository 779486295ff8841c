"""`neoembed info`: versions, compute device (with its instruction-set flags and measured speed), and the
attention backends that can run here."""

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


def _speed(torch, bf16: bool) -> list[tuple[str, str]]:
    """How fast this machine is, measured in about a second: machines of one model name and one instruction
    set differ twofold (shared hosts, clocks), so a time quoted from another machine says little without it."""
    import time

    start, total = time.perf_counter(), 0
    for step in range(2_000_000):  # pure Python: what data building and start-up run at
        total += step
    rows = [("python loop", f"{2 / (time.perf_counter() - start):.1f} M steps/s (one core)")]
    for dtype in (torch.float32, torch.bfloat16) if bf16 else (torch.float32,):
        matrix = torch.randn(1024, 1024, dtype=dtype)
        matrix @ matrix  # the first call allocates and picks kernels
        start = time.perf_counter()
        for _ in range(10):
            matrix @ matrix
        flops = 10 * 2 * 1024**3 / (time.perf_counter() - start)
        rows.append((f"{str(dtype).removeprefix('torch.')} matmul", f"{flops / 1e9:.0f} GFLOP/s"))
    return rows


def info() -> None:
    """Print package versions, the compute device and how fast it is, and which attention backends are
    available."""
    import platform

    import torch
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from neoembed.precision import CPU_BF16_ENV, cpu_flags, cpu_name, resolve_precision
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
    auto = resolve_precision()
    bf16 = str(auto.bf16_supported)
    if os.environ.get(CPU_BF16_ENV) is not None:
        bf16 += f" (set by {CPU_BF16_ENV})"
    device.add_row("bf16 hardware", bf16)
    if auto.device == "cpu":
        device.add_row("precision auto", f"{'bf16' if auto.train_bf16 else 'fp32'} ({auto.why})")
    device.add_row("cpu", cpu_name())
    device.add_row("cpu flags", cpu_flags())
    device.add_row("cpu capability", torch.backends.cpu.get_cpu_capability())
    device.add_row("torch threads", str(torch.get_num_threads()))
    for row in _speed(torch, auto.bf16_supported):
        device.add_row(*row)
    console.print(device)

    backends = Table("attention backend", "status", title="Attention backends")
    for name, status in available_backends().items():
        backends.add_row(name, escape(status))
    console.print(backends)
