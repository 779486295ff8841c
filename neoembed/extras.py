"""Optional packages: which extra installs each, and the one check that names it when it is missing.

A command imports what it needs when it runs (`neoembed --help` imports none of these), so a machine without,
say, faiss or fastapi (the GPU machine of docs/benchmarks/gpu.md) still pretrains and benches. Where a needed
package is missing, `require` (or the CLI's handler, for an import deep in a library) says which package and
which extra install it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from neoembed.errors import NeoembedError


@dataclass(frozen=True)
class OptionalPackage:
    package: str  # the distribution pip installs
    extra: str | None  # neoembed's extra that brings it; None: a core dependency


# Import name -> what installs it. Each extra here is one of pyproject.toml's (a test holds it).
OPTIONAL = {
    "faiss": OptionalPackage("faiss-cpu", "index"),
    "mteb": OptionalPackage("mteb", "mteb"),
    "fastapi": OptionalPackage("fastapi", "serve"),
    "uvicorn": OptionalPackage("uvicorn", "serve"),
    "prometheus_client": OptionalPackage("prometheus-client", "serve"),
    "onnxruntime": OptionalPackage("onnxruntime", "onnx"),
    "openai": OptionalPackage("openai", "dev"),  # bench serve's openai client round
    "deepspeed": OptionalPackage("deepspeed", "deepspeed"),
    "datasets": OptionalPackage("datasets", None),
}


class MissingPackageError(NeoembedError, ImportError):
    """An optional package a command needs is not installed. Exit code 1."""

    exit_code = 1


def install_hint(module: str) -> str:
    """`pip install ...` that brings `module`."""
    optional = OPTIONAL[module]
    if optional.extra is None:
        return f"pip install {optional.package} (a dependency of neoembed)"
    return f"pip install 'neoembed[{optional.extra}]' (or {optional.package} alone)"


def missing(module: str) -> MissingPackageError:
    return MissingPackageError(
        f"this needs the package {OPTIONAL[module].package}, which is not installed: {install_hint(module)}"
    )


def require(module: str) -> ModuleType:
    """`import module`, or a `MissingPackageError` naming its package and extra. `module` is a key of OPTIONAL."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is not None and error.name.split(".")[0] == module:
            raise missing(module) from error
        raise  # the package is there and one of its own imports failed: that traceback says more


def as_missing_package(error: ModuleNotFoundError) -> MissingPackageError | None:
    """The `MissingPackageError` for an import of an optional package that failed, else None."""
    top = (error.name or "").split(".")[0]
    return missing(top) if top in OPTIONAL else None
