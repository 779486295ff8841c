"""The one place neoembed first imports mteb: point its result cache at neoembed's cache, then import it.

mteb creates its default result cache (`$MTEB_CACHE`, else `~/.cache/mteb`) the moment it is imported, so the
variable must be set before the first `import mteb` in the process. Every module that uses mteb imports
`mteb` from here before any `from mteb... import` (a test holds it; ruff sorts this import first); each run
still passes its own `ResultCache` under the run's output directory.
"""

from __future__ import annotations

import os

from neoembed.cache import cache_root

os.environ.setdefault("MTEB_CACHE", str(cache_root() / "mteb"))

import mteb  # noqa: E402

__all__ = ["mteb"]
