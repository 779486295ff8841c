"""The one place neoembed first imports mteb: point its result cache at neoembed's cache, then import it.

mteb creates its default result cache (`$MTEB_CACHE`, else `~/.cache/mteb`) the moment it is imported, so the
variable must be set before the first `import mteb` in the process. Every module that uses mteb imports
`mteb` from here before any `from mteb... import` (a test holds it; ruff sorts this import first); each run
still passes its own `ResultCache` under the run's output directory.
"""

from __future__ import annotations

import logging
import os
import warnings

from neoembed.cache import cache_root

os.environ.setdefault("MTEB_CACHE", str(cache_root() / "mteb"))

from neoembed.extras import require  # noqa: E402

mteb = require("mteb")

__all__ = ["all_tasks", "mteb"]


def all_tasks() -> list:
    """Every task mteb registers, beta and superseded ones included, instantiated quietly: mteb logs and warns
    about each beta task it instantiates (over 250 lines), which says nothing when only their names and
    metadata are read."""
    quiet = logging.getLogger("mteb")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return list(mteb.get_tasks(exclude_superseded=False, exclude_beta=False))
    finally:
        quiet.setLevel(level)
