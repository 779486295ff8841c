"""The leakage guard: texts no training row may carry, because a held-out evaluation scores them.

Every build guards FOLDOC's held-out set (its terms and definitions, `foldoc.heldout_texts`: the cross-source
set `neoembed contrastive` and `mteb-eval` score), the texts of any `--eval-texts` files, and those of the
tasks of `--eval-benchmark` (one set per task, collected by `neoembed.evaluation.benchmark_texts` and handed
to the build as `GuardedTexts`). A row whose query or positive is one of
them is dropped (reason `leakage`, counted per guarded set), and so is a negative. Texts match by `text_key`
(case, punctuation and spacing ignored). WordNet needs no entry here: its held-out synsets never become
training rows (`wordnet.split_of`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from neoembed.data.foldoc import heldout_texts
from neoembed.data.normalize import clean, text_key

FOLDOC = "foldoc"
EVAL_TEXTS = "eval_texts"


@dataclass(frozen=True)
class GuardedTexts:
    """Evaluation texts a build keeps out of training, collected by its caller: the text keys of each named
    set (a benchmark's tasks), and the sets that could not be collected (name -> why)."""

    sets: dict[str, frozenset[int]]
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LeakGuard:
    """The guarded text keys of each held-out set, in the order a leaked row is attributed to them."""

    sets: dict[str, frozenset[int]]
    skipped: dict[str, str] = field(default_factory=dict)  # benchmark tasks not guarded: name -> why

    @cached_property
    def keys(self) -> frozenset[int]:
        return frozenset().union(*self.sets.values())

    def match(self, *keys: int) -> str | None:
        """The first guarded set holding any of `keys`, or None."""
        return next((name for name, guarded in self.sets.items() if not guarded.isdisjoint(keys)), None)

    @cached_property
    def digest(self) -> str:
        """Changes exactly when a guarded set does: part of every source's build fingerprint."""
        sha = hashlib.sha256()
        for name, guarded in self.sets.items():
            sha.update(name.encode())
            sha.update(np.sort(np.fromiter(guarded, np.int64, len(guarded))).tobytes())
        return sha.hexdigest()

    def sizes(self) -> dict[str, int]:
        return {name: len(guarded) for name, guarded in self.sets.items()}


def leak_guard(eval_texts: Iterable[Path] = (), benchmark: GuardedTexts | None = None) -> LeakGuard:
    """FOLDOC's held-out texts, then the texts of the `eval_texts` files, then the `benchmark`'s sets (a set
    per task, named by the task)."""
    foldoc = frozenset(text_key(clean(text)) for text in heldout_texts())
    sets = {FOLDOC: foldoc, EVAL_TEXTS: frozenset(read_eval_keys(eval_texts))}
    if benchmark is None:
        return LeakGuard(sets)
    return LeakGuard(sets | benchmark.sets, dict(benchmark.skipped))


def read_eval_keys(files: Iterable[Path]) -> set[int]:
    """Normalised keys of evaluation texts: `.txt` one text a line, `.jsonl` a `text` field a line."""
    keys: set[int] = set()
    for file in sorted(Path(f) for f in files):
        for lineno, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            if file.suffix == ".jsonl":
                try:
                    line = json.loads(line)["text"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise ValueError(f"{file}:{lineno}: expected a JSON object with a 'text' field") from None
            keys.add(text_key(clean(line)))
    return keys
