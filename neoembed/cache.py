"""Where neoembed keeps what it downloads or unpacks once per machine (Debian text packages, mteb results)."""

import os
from pathlib import Path


def cache_root() -> Path:
    """Root of neoembed's caches: $NEOEMBED_CACHE, else $XDG_CACHE_HOME/neoembed, else ~/.cache/neoembed."""
    if os.environ.get("NEOEMBED_CACHE"):
        return Path(os.environ["NEOEMBED_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "neoembed"
