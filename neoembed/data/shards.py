"""Which share of a build's parts this process builds, and how the shares meet again.

A build splits its work into units (a source's part of `rows_per_shard` rows: stage 2 encodes, mines and
writes each unit on its own, searching that part's whole pool), so N processes build units i, i+N, ... and
the result is the same, row for row, as one process building them all. The share comes from, in order:

- `--shard i/N` on the command line;
- torchrun or DeepSpeed's launcher (RANK and WORLD_SIZE): the ranks of one launch, which wait for each other;
  the first rank stages the sources before the others read them, and merges the stats once all are done;
- a SLURM job array (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_COUNT);
- a Kubernetes Indexed Job (JOB_COMPLETION_INDEX, with the Job's completions given as NEOEMBED_SHARDS,
  since Kubernetes does not pass them to the pod);
- else the whole build in this process.

Independent jobs (SLURM, Kubernetes, `--shard`) each stage the sources (the first to finish writes them, the
others reuse them) and whichever finishes last writes the stats; `--merge-stats` writes them on demand.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from neoembed.errors import InputError
from neoembed.run_files import write_json

SHARDS_FILE = "shards.json"  # how many shares the build was split into, fixed by its first run


@dataclass(frozen=True)
class Share:
    index: int
    count: int
    launcher: str  # "flag", "torchrun", "slurm", "kubernetes" or "single"

    @property
    def ranks(self) -> bool:
        """The shares are ranks of one launch, which can wait for each other."""
        return self.launcher == "torchrun"


def share_from_environment(environ: Mapping[str, str]) -> Share | None:
    """The share a launcher or scheduler gives this process, or None when nothing says."""
    if int(environ.get("WORLD_SIZE", "1")) > 1:
        return Share(int(environ.get("RANK", "0")), int(environ["WORLD_SIZE"]), "torchrun")
    if "SLURM_ARRAY_TASK_ID" in environ:
        first = int(environ.get("SLURM_ARRAY_TASK_MIN", "0"))
        count = int(environ["SLURM_ARRAY_TASK_COUNT"])
        return Share(int(environ["SLURM_ARRAY_TASK_ID"]) - first, count, "slurm")
    if "JOB_COMPLETION_INDEX" in environ:
        if "NEOEMBED_SHARDS" not in environ:
            raise InputError(
                "a Kubernetes Indexed Job gives this pod its index (JOB_COMPLETION_INDEX) but not the number of "
                "completions: set NEOEMBED_SHARDS to the Job's completions in the pod spec",
                param="NEOEMBED_SHARDS",
            )
        return Share(int(environ["JOB_COMPLETION_INDEX"]), int(environ["NEOEMBED_SHARDS"]), "kubernetes")
    return None


def resolve_share(flag: tuple[int, int] | None, environ: Mapping[str, str] = os.environ) -> Share:
    """This process's share: the flag's, the environment's, or the whole build."""
    share = Share(*flag, "flag") if flag is not None else share_from_environment(environ)
    share = share or Share(0, 1, "single")
    if not 0 <= share.index < share.count:
        raise InputError(f"shard {share.index}/{share.count}: expected 0 <= index < count", param="--shard")
    return share


def check_share_count(out: Path, share: Share) -> None:
    """A build keeps the number of shares its first run split it into: runs that split it differently would
    divide the units another way and build some twice while others wait."""
    path = Path(out) / SHARDS_FILE
    if path.is_file():
        recorded = json.loads(path.read_text())["count"]
        if recorded != share.count and not (Path(out) / "stats.json").is_file():
            raise InputError(
                f"{out} is a build split into {recorded} shards and this run is shard {share.index}/"
                f"{share.count}; run its shards as i/{recorded}, or build into another --out",
                param="--shard",
            )
    elif share.index == 0 or share.launcher != "torchrun":
        write_json(path, {"count": share.count})
