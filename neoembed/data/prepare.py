"""Stage 1 of a build: read each source, map, normalise, cut to the token budget, filter, guard against
leakage, dedup across sources.

Sources run in manifest order; a (query, positive) pair already kept by an earlier row or source is a
duplicate, in either order for a symmetric source (whose rows `both_directions` also writes reversed). Each source's kept rows go to `staging/<source>.parquet` with a JSON marker holding its stats and a
fingerprint chained over the sources before it, so a resumed build reuses finished sources unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from neoembed.data.leakage import LeakGuard
from neoembed.data.manifest import Manifest, check_columns
from neoembed.data.mapping import FieldPath, RowError
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
from neoembed.data.relations import relation_key
from neoembed.data.sources import read_source
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
BATCH_ROWS = 10_000
TRUNCATED_FIELDS = ("query", "positive", "negatives")
# Bump when filtering, source order or the staging schema changes (a change of text_key bumps KEY_VERSION).
FORMAT_VERSION = "6." + KEY_VERSION


class MalformedRow(TypedDict):
    row: int  # the row's index in the source
    error: str  # why it could not be read


class StagedCounts(TypedDict):
    """What stage 1 counted for a source; stats.json carries them on (`stats.SourceStats`)."""

    rows_read: int
    rows_available: int | None  # the whole split's rows; None if a streamed source does not say
    expected_rows: int | None  # the manifest's
    kept: int
    dropped: dict[str, int]  # reason (normalize.REASONS) -> rows
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
    seen: set[int],
    guard: LeakGuard,
    local_root: Path | None,
    max_rows: int | None,
    truncator: Truncator | None = None,
    both_directions: bool = False,
) -> StagedSource:
    """Stage one source; adds its kept pair keys to `seen`; returns its stats (also written as the marker).

    `truncator` cuts long texts to a token budget before the filters; `both_directions` also writes each kept
    row of a symmetric source reversed, (positive, query). The stages: resume a finished staging, read the
    source, keep or drop each row (`RowFilter`, counting in a `Tally`), write the kept rows, record the counts."""
    parquet_path, marker = staging_paths(out, manifest.name)
    if (staged := _staged_earlier(marker, parquet_path, fingerprint, seen, manifest.symmetric)) is not None:
        return staged
    dataset, rows_available = read_source(manifest, local_root, max_rows)
    check_columns(manifest, dataset.features, where=f"{manifest.dataset or manifest.kind} {manifest.split}")
    total = len(dataset) if max_rows is None else min(len(dataset), max_rows)
    options = manifest.options
    tally = Tally(list(guard.sets))
    keep = RowFilter(
        Limits(options.min_chars, options.max_chars, options.min_score),
        guard,
        seen,
        truncator,
        manifest.symmetric,
    )
    reverse = both_directions and manifest.symmetric
    paths = manifest.mapping.paths()
    parquet_path.parent.mkdir(parents=True, exist_ok=True)
    with (
        atomic_write(parquet_path) as tmp,
        pq.ParquetWriter(tmp, STAGING_SCHEMA, compression="zstd") as writer,
        tqdm(total=total, desc=f"prepare {manifest.name}", unit="row") as bar,
    ):
        for start in range(0, total, BATCH_ROWS):
            stop = min(start + BATCH_ROWS, total)
            rows: dict[str, list] = {name: [] for name in STAGING_SCHEMA.names}
            for index, row in enumerate(_read_rows(dataset[start:stop], paths), start):
                if (kept := keep(index, row, tally)) is not None:
                    for n, values in enumerate(kept.written(manifest.name, reverse)):
                        for name, value in zip(STAGING_SCHEMA.names, values, strict=True):
                            rows[name].append(value)
                        tally.count_written(values, reversed_row=n > 0)
            if rows["query"]:
                writer.write_table(pa.table(rows, schema=STAGING_SCHEMA), row_group_size=BATCH_ROWS)
            bar.update(stop - start)
    stats = tally.staged(fingerprint, manifest, total, rows_available)
    write_json(marker, stats)
    return stats


def _staged_earlier(
    marker: Path, parquet_path: Path, fingerprint: str, seen: set[int], symmetric: bool
) -> StagedSource | None:
    """A finished staging of the same inputs, its pairs added to `seen`; None when there is none."""
    if not marker.exists():
        return None
    stats = json.loads(marker.read_text())
    if stats["fingerprint"] != fingerprint or not parquet_path.exists():
        return None
    keys = pq.read_table(parquet_path, columns=["query_key", "positive_key"])
    query_keys, positive_keys = keys["query_key"].to_numpy(), keys["positive_key"].to_numpy()
    seen.update(pair_keys(query_keys, positive_keys).tolist())
    if symmetric:
        seen.update(pair_keys(positive_keys, query_keys).tolist())
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
    """Stage 1's running counts for one source: what was dropped and why, cut, reversed, and written."""

    guarded_sets: list[str]
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    leaked_rows: dict[str, int] = field(init=False)
    leaked_negatives: int = 0
    malformed_example: MalformedRow | None = None
    truncated: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TRUNCATED_FIELDS, 0))
    reversed_rows: int = 0
    query_lengths: list[int] = field(default_factory=list)
    positive_lengths: list[int] = field(default_factory=list)
    negative_counts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.leaked_rows = dict.fromkeys(self.guarded_sets, 0)

    def malformed(self, index: int, error: RowError) -> None:
        self.dropped["malformed"] += 1
        if self.malformed_example is None:
            self.malformed_example = MalformedRow(row=index, error=str(error))

    def count_written(self, values: tuple, reversed_row: bool) -> None:
        first, second, negatives = values[:3]
        self.query_lengths.append(len(first))
        self.positive_lengths.append(len(second))
        self.negative_counts.append(len(negatives))
        self.reversed_rows += reversed_row

    def staged(
        self, fingerprint: str, manifest: Manifest, total: int, rows_available: int | None
    ) -> StagedSource:
        return StagedSource(
            fingerprint=fingerprint,
            source=manifest.name,
            rows_read=total,
            rows_available=rows_available,
            expected_rows=manifest.expected_rows,
            kept=len(self.query_lengths),
            dropped=self.dropped,
            rows_dropped_for_leakage=self.leaked_rows,
            negatives_dropped_for_leakage=self.leaked_negatives,
            truncated=self.truncated,
            reversed=self.reversed_rows,
            malformed_example=self.malformed_example,
            given_negatives_per_row=round(float(np.mean(self.negative_counts)), 3)
            if self.negative_counts
            else 0.0,
            query_chars=_percentiles(self.query_lengths),
            positive_chars=_percentiles(self.positive_lengths),
        )


@dataclass
class RowFilter:
    """Whether a read row is kept: cleaned and cut to the token budget, then the manifest's limits, the leakage
    guard and the pairs kept so far (`seen`, which it extends), in that order; each drop is counted."""

    limits: Limits
    guard: LeakGuard
    seen: set[int]
    truncator: Truncator | None
    symmetric: bool

    def __call__(self, index: int, row, tally: Tally) -> KeptRow | None:
        if isinstance(row, RowError):
            tally.malformed(index, row)
            return None
        query, positive, score, relations, given = row
        query, positive, whole_keys, cut = self._cut(clean(query or ""), clean(positive or ""))
        query_key, positive_key = text_key(query), text_key(positive)
        reason = check(query, positive, query_key, positive_key, score, self.limits)
        if reason is None and (guarded := self.guard.match(query_key, positive_key, *whole_keys)) is not None:
            reason = "leakage"
            tally.leaked_rows[guarded] += 1
        if reason is None:
            pair = pair_key(query_key, positive_key)
            # A symmetric source's (b, a) is its (a, b): both orders are looked up and remembered.
            pairs = (pair, pair_key(positive_key, query_key)) if self.symmetric else (pair,)
            reason = "duplicate" if any(p in self.seen for p in pairs) else None
            self.seen.update(pairs)
        if reason is not None:
            tally.dropped[reason] += 1
            return None
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
    """A path's value as a list: a path through `[*]` or onto a list column yields a list, others one value."""
    return found if isinstance(found, list) else [found]


def _number(value) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise RowError(f"score: not a number: {value!r}") from None


def _percentiles(lengths: list[int]) -> dict[str, int]:
    if not lengths:
        return {}
    values = np.percentile(np.asarray(lengths), [5, 50, 95, 99])
    return {f"p{p}": int(v) for p, v in zip((5, 50, 95, 99), values, strict=True)}
