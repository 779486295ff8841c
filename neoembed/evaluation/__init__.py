"""Evaluation: the uniform MTEB harness (the modules here) and the GLUE fine-tuning harness (``glue/``).

MTEB: ``models`` loads any embedder under one protocol, ``model_meta`` writes and reads the mteb ModelMeta
of exported embedders, ``local_tasks`` builds offline WordNet tasks, ``tasks`` selects tasks, ``runner``
runs them resumably, ``significance`` tests paired differences between models and ``summary`` aggregates
the results.

mteb creates its default result cache (``$MTEB_CACHE`` or ``~/.cache/mteb``) the moment it is imported.
This package is the one place that points it somewhere neoembed owns, before any of its modules imports
mteb; every run still passes its own ``ResultCache`` under the run's output directory.
"""

import os

from neoembed.cache import cache_root

os.environ.setdefault("MTEB_CACHE", str(cache_root() / "mteb"))
