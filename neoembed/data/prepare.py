"""Stage 1 of a build: read each source, map, normalise, cut to the token budget, filter, guard against
leakage, dedup across sources.

Sources run in manifest order; a (query, positive) pair already kept by an earlier row or source is a
duplicate, in either order for a symmetric source (whose rows `both_directions` also writes reversed). Each source's kept rows go to `staging/<source>.parquet` with a JSON marker holding its stats and a
fingerprint chained over the sources before it, so a resumed build reuses finished sources unchanged.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from neoembed.data.key_set import KeySet
from neoembed.data.leakage import LeakGuard
from neoembed.data.manifest import Manifest
from neoembed.data.mapping import FieldPath, MissingColumn, RowError
from neoembed.data.normalize import (
    KEY_VERSION,
    REASONS,
    Limits,
    check,
    clean,
    clean_negatives,
    pair_key,
    pair_keys,
    text_key,
)
from neoembed.data.pairs_file import BATCH_ROWS, MISSING, Batch, is_held_out
from neoembed.data.relations import relation_key
from neoembed.data.sources import source_batches
from neoembed.data.truncate import Truncator
from neoembed.run_files import atomic_write, write_json

STAGING_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("positive", pa.string()),
        ("negatives", pa.list_(pa.string())),
        ("source", pa.string()),
        ("query_key", pa.int64()),  # text_key of each text
        ("positive_key", pa.int64()),
        ("relations", pa.list_(pa.list_(pa.int64()))),  # per mapping.relations kind, the row's relation keys
    ]
)
TRUNCATED_FIELDS = ("query", "positive", "negatives")
EXAMPLES_KEPT = 5  # rows named per drop reason, the first ones met
# Bump when filtering, source order or the staging schema changes (a change of text_key bumps KEY_VERSION).
FORMAT_VERSION = "7." + KEY_VERSION


class MalformedRow(TypedDict):
    where: str  # the row: `row N` of a dataset, `FILE:LINE` of your pairs file
    error: str  # why it could not be read


class StagedCounts(TypedDict):
    """What stage 1 counted for a source; stats.json carries them on (`stats.SourceStats`)."""

    rows_read: int
    rows_available: int | None  # the whole split's rows; None if a streamed source does not say
    expected_rows: int | None  # the manifest's
    kept: int
    dropped: dict[str, int]  # reason (normalize.REASONS) -> rows
    dropped_examples: dict[str, list[str]]  # reason -> where the first rows it dropped are (`EXAMPLES_KEPT`)
    rows_dropped_for_leakage: dict[str, int]  # guarded set -> rows (dropped["leakage"] in all)
    negatives_dropped_for_leakage: int
    truncated: dict[str, int]  # field (TRUNCATED_FIELDS) -> texts of kept rows cut to the token budget
    reversed: int  # rows also written as (positive, query): part of `kept`
    malformed_example: MalformedRow | None  # the first row that could not be read
    given_negatives_per_row: float
    query_chars: dict[str, int]  # length percentile ("p5", "p50", "p95", "p99") -> characters; {} if no rows
    positive_chars: dict[str, int]


class StagedSource(StagedCounts):
    """A staged source's marker (`staging/<source>.json`): its counts and the fingerprint of its inputs."""

    fingerprint: str
    source: str


def staging_paths(out: Path, name: str) -> tuple[Path, Path]:
    return out / "staging" / f"{name}.parquet", out / "staging" / f"{name}.json"


def prepare_source(
    manifest: Manifest,
    fingerprint: str,
    out: Path,
    seen: KeySet,
    guard: LeakGuard,
    local_root: Path | None,
    max_rows: int | None,
    truncator: Truncator | None = None,
    both_directions: bool = False,
    holdout: bool = False,
) -> StagedSource:
    """Stage one source; adds its kept pair keys to `seen`; returns its stats (also written as the marker).

    `truncator` cuts long texts to a token budget before the filters; `both_directions` also writes each kept
    row of a symmetric source reversed, (positive, query); `holdout` keeps the test split of your pairs file
    (`pairs_file.is_held_out`) out (the caller says it only for a pairs file). The stages: resume a finished staging, read the source batch by batch,
    keep or drop each row (`RowFilter`, counting in a `Tally`), write the kept rows, record the counts."""
    parquet_path, marker = staging_paths(out, manifest.name)
    if (staged := _staged_earlier(marker, parquet_path, fingerprint, seen, manifest.symmetric)) is not None:
        return staged
    batches, total, rows_available = source_batches(manifest, local_root, max_rows)
    options = manifest.options
    tally = Tally(list(guard.sets))
    keep = RowFilter(
        Limits(options.min_chars, options.max_chars, options.min_score),
        guard,
        seen,
        truncator,
        manifest.symmetric,
        holdout,
    )
    reverse = both_directions and manifest.symmetric
    paths = manifest.mapping.paths()
    parquet_path.parent.mkdir(parents=True, exist_ok=True)
    with (
        atomic_write(parquet_path) as tmp,
        pq.ParquetWriter(tmp, STAGING_SCHEMA, compression="zstd") as writer,
        tqdm(total=total, desc=f"prepare {manifest.name}", unit="row") as bar,
    ):
        for batch in batches:
            rows: dict[str, list] = {name: [] for name in STAGING_SCHEMA.names}
            for offset, row in enumerate(_read_rows(batch.columns, paths)):
                kept = keep(row, tally)
                if isinstance(kept, str):
                    tally.drop(kept, batch, offset, row if isinstance(row, RowError) else None)
                    continue
                for n, values in enumerate(kept.written(manifest.name, reverse)):
                    for name, value in zip(STAGING_SCHEMA.names, values, strict=True):
                        rows[name].append(value)
                    tally.count_written(values, reversed_row=n > 0)
            if rows["query"]:
                writer.write_table(pa.table(rows, schema=STAGING_SCHEMA), row_group_size=BATCH_ROWS)
            tally.rows_read += len(batch)
            bar.update(len(batch))
    stats = tally.staged(fingerprint, manifest, rows_available)
    write_json(marker, stats)
    return stats


def _staged_earlier(
    marker: Path, parquet_path: Path, fingerprint: str, seen: KeySet, symmetric: bool
) -> StagedSource | None:
    """A finished staging of the same inputs, its pairs added to `seen`; None when there is none."""
    if not marker.exists():
        return None
    stats = json.loads(marker.read_text())
    if stats["fingerprint"] != fingerprint or not parquet_path.exists():
        return None
    keys = pq.read_table(parquet_path, columns=["query_key", "positive_key"])
    query_keys, positive_keys = keys["query_key"].to_numpy(), keys["positive_key"].to_numpy()
    seen.update(pair_keys(query_keys, positive_keys))
    if symmetric:
        seen.update(pair_keys(positive_keys, query_keys))
    return stats


@dataclass
class KeptRow:
    """A row that passed every filter, cut to the budget, with its negatives cleaned."""

    query: str
    positive: str
    query_key: int
    positive_key: int
    negatives: list[str]
    relations: list[list[int]]

    def written(self, source: str, reverse: bool) -> list[tuple]:
        """The staging rows it becomes (STAGING_SCHEMA's columns): itself, then reversed where asked."""
        rows = [(self.query, self.positive, self.negatives, source, self.query_key, self.positive_key)]
        if reverse:
            rows.append(
                (self.positive, self.query, self.negatives, source, self.positive_key, self.query_key)
            )
        return [(*row, self.relations) for row in rows]


@dataclass
class Tally:
    """Stage 1's running counts for one source: what was dropped, why and where first, cut, reversed, and
    written. Its memory does not grow with the rows: lengths are counted per length."""

    guarded_sets: list[str]
    rows_read: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    dropped_examples: dict[str, list[str]] = field(default_factory=dict)
    leaked_rows: dict[str, int] = field(init=False)
    leaked_negatives: int = 0
    malformed_example: MalformedRow | None = None
    truncated: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TRUNCATED_FIELDS, 0))
    reversed_rows: int = 0
    written: int = 0
    negatives_written: int = 0
    query_lengths: Counter[int] = field(default_factory=Counter)
    positive_lengths: Counter[int] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.leaked_rows = dict.fromkeys(self.guarded_sets, 0)

    def drop(self, reason: str, batch: Batch, offset: int, error: RowError | None = None) -> None:
        self.dropped[reason] += 1
        examples = self.dropped_examples.setdefault(reason, [])
        if len(examples) < EXAMPLES_KEPT:
            examples.append(batch.where(offset))
        if error is not None and self.malformed_example is None:
            self.malformed_example = MalformedRow(where=batch.where(offset), error=str(error))

    def count_written(self, values: tuple, reversed_row: bool) -> None:
        first, second, negatives = values[:3]
        self.query_lengths[len(first)] += 1
        self.positive_lengths[len(second)] += 1
        self.written += 1
        self.negatives_written += len(negatives)
        self.reversed_rows += reversed_row

    def staged(self, fingerprint: str, manifest: Manifest, rows_available: int | None) -> StagedSource:
        return StagedSource(
            fingerprint=fingerprint,
            source=manifest.name,
            rows_read=self.rows_read,
            rows_available=rows_available,
            expected_rows=manifest.expected_rows,
            kept=self.written,
            dropped=self.dropped,
            dropped_examples=self.dropped_examples,
            rows_dropped_for_leakage=self.leaked_rows,
            negatives_dropped_for_leakage=self.leaked_negatives,
            truncated=self.truncated,
            reversed=self.reversed_rows,
            malformed_example=self.malformed_example,
            given_negatives_per_row=round(self.negatives_written / self.written, 3) if self.written else 0.0,
            query_chars=_percentiles(self.query_lengths),
            positive_chars=_percentiles(self.positive_lengths),
        )


@dataclass
class RowFilter:
    """Whether a read row is kept: cleaned and cut to the token budget, then the manifest's limits, the leakage
    guard and the pairs kept so far (`seen`, which it extends), in that order; each drop is counted."""

    limits: Limits
    guard: LeakGuard
    seen: KeySet
    truncator: Truncator | None
    symmetric: bool
    holdout: bool = False  # keep your pairs file's test split (`pairs_file.is_held_out`) out

    def __call__(self, row, tally: Tally) -> KeptRow | str:
        """The row to write, or the reason it is dropped (`normalize.REASONS`)."""
        if isinstance(row, RowError):
            return "missing_column" if isinstance(row, MissingColumn) else "malformed"
        query, positive, score, relations, given = row
        query, positive = clean(query or ""), clean(positive or "")
        held = self.holdout and is_held_out(text_key(query))  # chosen on the whole anchor, before any cut
        query, positive, whole_keys, cut = self._cut(query, positive)
        query_key, positive_key = text_key(query), text_key(positive)
        reason = check(query, positive, query_key, positive_key, score, self.limits)
        if reason is None and held:
            reason = "held_out"
        if reason is None and (guarded := self.guard.match(query_key, positive_key, *whole_keys)) is not None:
            reason = "leakage"
            tally.leaked_rows[guarded] += 1
        if reason is None:
            pair = pair_key(query_key, positive_key)
            # A symmetric source's (b, a) is its (a, b): both orders are looked up and remembered.
            pairs = (pair, pair_key(positive_key, query_key)) if self.symmetric else (pair,)
            reason = "duplicate" if any(p in self.seen for p in pairs) else None
            for pair in pairs:
                self.seen.add(pair)
        if reason is not None:
            return reason
        negatives, leaked, cut_negatives = clean_negatives(
            given, query_key, positive_key, self.limits, self.guard.keys, self.truncator
        )
        tally.leaked_negatives += leaked
        for name in cut:
            tally.truncated[name] += 1
        tally.truncated["negatives"] += cut_negatives
        return KeptRow(query, positive, query_key, positive_key, negatives, relations)

    def _cut(self, query: str, positive: str) -> tuple[str, str, list[int], list[str]]:
        """The texts cut to the token budget, the keys of those that were cut (an evaluation text longer than
        the budget must still match: whole texts' keys are guarded too), and which fields were cut."""
        if self.truncator is None:
            return query, positive, [], []
        whole_keys, cut, short = [], [], []
        for text, name in ((query, "query"), (positive, "positive")):
            shortened, was_cut = self.truncator(text)
            short.append(shortened)
            if was_cut:
                whole_keys.append(text_key(text))
                cut.append(name)
        return short[0], short[1], whole_keys, cut


def _read_rows(batch: dict[str, list], paths: dict[str, FieldPath]):
    """(query, positive, score, relation keys per kind, raw negatives) per row of a batch, or the RowError the
    row raised."""
    query_path, positive_path, score_path = paths["query"], paths["positive"], paths.get("score")
    negative_paths = [p for name, p in paths.items() if name.startswith("negatives[")]
    relation_paths = [p for name, p in paths.items() if name.startswith("relations[")]
    for offset in range(len(batch[query_path.column])):

        def value(path: FieldPath | None, offset=offset):
            return None if path is None else path.extract_from_column(batch[path.column][offset])

        try:
            query, positive = value(query_path), value(positive_path)
            if query is MISSING or positive is MISSING:
                raise MissingColumn(f"no {query_path.column if query is MISSING else positive_path.column}")
            if not isinstance(query, str | None) or not isinstance(positive, str | None):
                raise RowError("query and positive must be strings")
            score = _number(value(score_path))
            negatives = [text for path in negative_paths for text in _flat(value(path))]
            relations = [
                [relation_key(v) for v in _flat(value(path)) if v is not None] for path in relation_paths
            ]
        except RowError as err:
            yield err
            continue
        yield query, positive, score, relations, negatives


def _flat(found) -> list:
    """A path's value as a list: a path through `[*]` or onto a list column yields a list, others one value
    (none for a column the row lacks)."""
    if found is MISSING:
        return []
    return found if isinstance(found, list) else [found]


def _number(value) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise RowError(f"score: not a number: {value!r}") from None


def _percentiles(lengths: Counter[int]) -> dict[str, int]:
    """The 5th, 50th, 95th and 99th percentiles of lengths counted per length, as numpy's default (linear)
    method gives them on the lengths themselves."""
    if not lengths:
        return {}
    values = np.array(sorted(lengths))
    ends = np.cumsum([lengths[v] for v in values])  # sorted position just past each length's last copy
    out = {}
    for p in (5, 50, 95, 99):
        position = (ends[-1] - 1) * p / 100
        low, high = int(np.floor(position)), int(np.ceil(position))
        at = values[np.searchsorted(ends, [low, high], side="right")]
        out[f"p{p}"] = int(at[0] + (at[1] - at[0]) * (position - low))
    return out
