"""Stage 1 of a build: read each source, map, normalise, cut to the token budget, filter, guard against
leakage, dedup across sources.

Sources run in manifest order; a (query, positive) pair already kept by an earlier row or source is a
duplicate, in either order for a symmetric source (whose rows `both_directions` also writes reversed). Each source's kept rows go to `staging/<source>.parquet` with a JSON marker holding its stats and a
fingerprint chained over the sources before it, so a resumed build reuses finished sources unchanged.
"""

from __future__ import annotations

import json
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
    row of a symmetric source reversed, (positive, query)."""
    parquet_path, marker = staging_paths(out, manifest.name)
    symmetric = manifest.symmetric
    if marker.exists():
        stats = json.loads(marker.read_text())
        if stats["fingerprint"] == fingerprint and parquet_path.exists():
            keys = pq.read_table(parquet_path, columns=["query_key", "positive_key"])
            query_keys, positive_keys = keys["query_key"].to_numpy(), keys["positive_key"].to_numpy()
            seen.update(pair_keys(query_keys, positive_keys).tolist())
            if symmetric:
                seen.update(pair_keys(positive_keys, query_keys).tolist())
            return stats

    dataset, rows_available = read_source(manifest, local_root, max_rows)
    check_columns(manifest, dataset.features, where=f"{manifest.dataset or manifest.kind} {manifest.split}")
    total = len(dataset) if max_rows is None else min(len(dataset), max_rows)
    paths = manifest.mapping.paths()
    limits = Limits(manifest.options.min_chars, manifest.options.max_chars, manifest.options.min_score)
    dropped = dict.fromkeys(REASONS, 0)
    leak_keys, leaked_rows, leaked_negatives = guard.keys, dict.fromkeys(guard.sets, 0), 0
    malformed_example = None
    truncated, reversed_rows = dict.fromkeys(TRUNCATED_FIELDS, 0), 0
    query_lengths, positive_lengths, negative_counts = [], [], []

    parquet_path.parent.mkdir(parents=True, exist_ok=True)
    with (
        atomic_write(parquet_path) as tmp,
        pq.ParquetWriter(tmp, STAGING_SCHEMA, compression="zstd") as writer,
        tqdm(total=total, desc=f"prepare {manifest.name}", unit="row") as bar,
    ):
        for start in range(0, total, BATCH_ROWS):
            stop = min(start + BATCH_ROWS, total)
            rows = {name: [] for name in STAGING_SCHEMA.names}
            for index, row in enumerate(_read_rows(dataset[start:stop], paths), start):
                if isinstance(row, RowError):
                    dropped["malformed"] += 1
                    if malformed_example is None:
                        malformed_example = MalformedRow(row=index, error=str(row))
                    continue
                query, positive, score, relations, given = row
                query, positive = clean(query or ""), clean(positive or "")
                # An evaluation text longer than the budget must still match: whole texts' keys are guarded too.
                whole_keys, cut = [], []
                if truncator is not None:
                    (short_query, query_cut), (short_positive, positive_cut) = (
                        truncator(query),
                        truncator(positive),
                    )
                    for text, field, was_cut in (
                        (query, "query", query_cut),
                        (positive, "positive", positive_cut),
                    ):
                        if was_cut:
                            whole_keys.append(text_key(text))
                            cut.append(field)
                    query, positive = short_query, short_positive
                query_key, positive_key = text_key(query), text_key(positive)
                reason = check(query, positive, query_key, positive_key, score, limits)
                if reason is None and not leak_keys.isdisjoint((query_key, positive_key, *whole_keys)):
                    reason = "leakage"
                    leaked_rows[guard.match(query_key, positive_key, *whole_keys)] += 1
                if reason is None:
                    pair = pair_key(query_key, positive_key)
                    # A symmetric source's (b, a) is its (a, b): both orders are looked up and remembered.
                    pairs = (pair, pair_key(positive_key, query_key)) if symmetric else (pair,)
                    reason = "duplicate" if any(p in seen for p in pairs) else None
                    seen.update(pairs)
                if reason is not None:
                    dropped[reason] += 1
                    continue
                negatives, leaked, cut_negatives = clean_negatives(
                    given, query_key, positive_key, limits, leak_keys, truncator
                )
                leaked_negatives += leaked
                for field in cut:
                    truncated[field] += 1
                truncated["negatives"] += cut_negatives
                written = [(query, positive, query_key, positive_key)]
                if both_directions and symmetric:
                    written.append((positive, query, positive_key, query_key))
                    reversed_rows += 1
                for first, second, first_key, second_key in written:
                    for name, value in zip(
                        STAGING_SCHEMA.names,
                        (first, second, negatives, manifest.name, first_key, second_key, relations),
                    ):
                        rows[name].append(value)
                    query_lengths.append(len(first))
                    positive_lengths.append(len(second))
                    negative_counts.append(len(negatives))
            if rows["query"]:
                writer.write_table(pa.table(rows, schema=STAGING_SCHEMA), row_group_size=BATCH_ROWS)
            bar.update(stop - start)

    stats = StagedSource(
        fingerprint=fingerprint,
        source=manifest.name,
        rows_read=total,
        rows_available=rows_available,
        expected_rows=manifest.expected_rows,
        kept=len(query_lengths),
        dropped=dropped,
        rows_dropped_for_leakage=leaked_rows,
        negatives_dropped_for_leakage=leaked_negatives,
        truncated=truncated,
        reversed=reversed_rows,
        malformed_example=malformed_example,
        given_negatives_per_row=round(float(np.mean(negative_counts)), 3) if negative_counts else 0.0,
        query_chars=_percentiles(query_lengths),
        positive_chars=_percentiles(positive_lengths),
    )
    write_json(marker, stats)
    return stats


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
