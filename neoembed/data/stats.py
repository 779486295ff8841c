"""A build's stats.json: its types and how the parts' counts add up to them, and the same read for people:
stats.md, the mining summary, and the model card's leakage sentence."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from neoembed.data.manifest import Manifest
from neoembed.data.normalize import REASONS
from neoembed.data.prepare import TRUNCATED_FIELDS, StagedCounts


class SourceStats(StagedCounts):
    """A source in stats.json: its manifest's description, stage 1's counts, and what its parts hold."""

    dataset: str | None
    licence: str
    licence_source: str
    budget: int | None  # None: the build read the whole source (--no-budgets, or the manifest sets none)
    rows_out: int
    parts: int
    part_checksums: dict[str, str | None]  # part -> xxh3, checked before training (None: built before them)
    negatives_per_row: float
    negatives_histogram: dict[str, int]  # negatives in a row -> rows
    mining: dict[str, Any] | None  # the parts' `MiningStats` summed, `seconds` left out; None: not mined


class BuildTotals(TypedDict):
    """The sources' counts summed, in stats.json."""

    rows_read: int
    kept: int
    rows_out: int
    dropped: dict[str, int]
    rows_dropped_for_leakage: dict[str, int]
    negatives_dropped_for_leakage: int
    reversed: int
    truncated: dict[str, int]
    negatives_per_row: float


class BuildStats(TypedDict):
    """stats.json: the build's hash and settings, each source's stats, their totals, and size warnings."""

    build_hash: str
    config: dict[str, Any]  # the build settings the stats depend on, as JSON
    sources: dict[str, SourceStats]
    total: BuildTotals
    warnings: list[str]


def source_stats(manifest: Manifest, budgets: bool, staged: StagedCounts, parts: list[dict]) -> SourceStats:
    histogram: dict[str, int] = {}
    for part in parts:
        for n, c in part["negatives_histogram"].items():
            histogram[n] = histogram.get(n, 0) + c
    rows = sum(p["rows"] for p in parts)
    mined = [p["mining"] for p in parts if p["mining"]]
    return SourceStats(
        dataset=manifest.dataset,
        licence=manifest.licence,
        licence_source=manifest.licence_source,
        budget=manifest.budget if budgets else None,
        rows_read=staged["rows_read"],
        rows_available=staged["rows_available"],
        expected_rows=staged["expected_rows"],
        dropped=staged["dropped"],
        rows_dropped_for_leakage=staged["rows_dropped_for_leakage"],
        negatives_dropped_for_leakage=staged["negatives_dropped_for_leakage"],
        kept=staged["kept"],
        reversed=staged["reversed"],
        truncated=staged["truncated"],
        rows_out=rows,
        parts=len(parts),
        part_checksums={f"part-{i:05d}.parquet": p.get("xxh3") for i, p in enumerate(parts)},
        malformed_example=staged["malformed_example"],
        dropped_examples=staged["dropped_examples"],
        negatives_per_row=round(sum(int(n) * c for n, c in histogram.items()) / rows, 3) if rows else 0.0,
        negatives_histogram=dict(sorted(histogram.items(), key=lambda kv: int(kv[0]))),
        given_negatives_per_row=staged["given_negatives_per_row"],
        mining=sum_counts(mined) if mined else None,
        query_chars=staged["query_chars"],
        positive_chars=staged["positive_chars"],
    )


def sum_counts(counts: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Field-wise sum of the parts' mining counts; a dict of counts (per relation kind) sums per key."""
    return {
        k: sum_counts([c[k] for c in counts]) if isinstance(v, dict) else sum(c[k] for c in counts)
        for k, v in counts[0].items()
    }


def build_totals(sources: dict[str, SourceStats]) -> BuildTotals:
    leaked: Counter[str] = Counter()  # update, unlike +, keeps a guarded set that dropped nothing
    for source in sources.values():
        leaked.update(source["rows_dropped_for_leakage"])
    rows_out = sum(s["rows_out"] for s in sources.values())
    negatives = sum(s["negatives_per_row"] * s["rows_out"] for s in sources.values())
    return BuildTotals(
        rows_read=sum(s["rows_read"] for s in sources.values()),
        kept=sum(s["kept"] for s in sources.values()),
        rows_out=rows_out,
        dropped={r: sum(s["dropped"][r] for s in sources.values()) for r in REASONS},
        rows_dropped_for_leakage=dict(leaked),
        negatives_dropped_for_leakage=sum(s["negatives_dropped_for_leakage"] for s in sources.values()),
        reversed=sum(s["reversed"] for s in sources.values()),
        truncated={k: sum(s["truncated"][k] for s in sources.values()) for k in TRUNCATED_FIELDS},
        negatives_per_row=round(negatives / rows_out, 3) if rows_out else 0.0,
    )


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def render_markdown(stats: Mapping[str, Any]) -> str:
    sources, total = stats["sources"], stats["total"]
    reasons = [r for r in REASONS if total["dropped"][r]] or ["duplicate"]
    lines = [
        "# Contrastive build statistics",
        "",
        f"Build hash `{stats['build_hash'][:16]}`; rows per shard {stats['config']['rows_per_shard']}; "
        f"max rows per source {stats['config']['max_rows'] or 'all'}; manifest budgets "
        f"{'on' if stats['config'].get('budgets') else 'off'}; STS rule {stats['config'].get('sts_rule', '-')}.",
        "",
        "## Rows",
        "",
        _row(["source", "read", *(f"dropped: {r}" for r in reasons), "kept", "written", "negatives/row"]),
        _row(["---"] + ["---:"] * (len(reasons) + 4)),
    ]
    for name, s in sources.items():
        cells = [s["rows_read"], *(s["dropped"][r] for r in reasons), s["kept"], s["rows_out"]]
        lines.append(_row([name, *cells, s["negatives_per_row"]]))
    cells = [total["rows_read"], *(total["dropped"][r] for r in reasons), total["kept"], total["rows_out"]]
    lines.append(_row(["**total**", *cells, total["negatives_per_row"]]))
    guarded = ", ".join(
        f"{name} {total['rows_dropped_for_leakage'].get(name, 0)} ({count:,} texts guarded)"
        for name, count in stats["config"]["guarded_texts"].items()
    )
    lines += [
        "",
        f"Leakage guard: rows dropped because their query or positive is a held-out text: {guarded}; "
        f"negatives dropped: {total['negatives_dropped_for_leakage']}.",
    ]
    config = stats["config"]
    if config.get("eval_benchmark"):
        lines += ["", f"Evaluation benchmark guarded: `{config['eval_benchmark']}` (a set per task, above)."]
    if config.get("eval_benchmark_skipped"):
        lines += ["", "Benchmark tasks NOT guarded (their data could not be loaded):", ""]
        lines += [f"- {name}: {why}" for name, why in config["eval_benchmark_skipped"].items()]
    if config.get("max_tokens"):
        cut = total["truncated"]
        lines += [
            "",
            f"Texts cut to {config['max_tokens']} tokens (`{config['tokenizer']}` tokenizer): "
            f"queries {cut['query']}, positives {cut['positive']}, negatives {cut['negatives']}; per source: "
            + (", ".join(f"{n} {sum(s['truncated'].values())}" for n, s in sources.items()) or "-")
            + ".",
        ]
    if total.get("reversed"):
        lines += ["", f"Symmetric rows also written reversed (in `kept`): {total['reversed']}."]

    lines += [
        "",
        "## Lengths (characters) and negatives",
        "",
        _row(["source", "query p5/p50/p95/p99", "positive p5/p50/p95/p99", "negatives histogram"]),
        _row(["---"] * 4),
    ]
    for name, s in sources.items():
        hist = ", ".join(f"{n}: {c}" for n, c in s["negatives_histogram"].items())
        lines.append(_row([name, _pct(s["query_chars"]), _pct(s["positive_chars"]), hist]))

    mined = {n: s["mining"] for n, s in sources.items() if s["mining"]}
    if mined:
        mining = stats["config"]["mining"]
        rescore = mining["rescore"]
        rescored = (
            f", rescored by `{rescore['model']}` at margin {rescore['margin']}" if rescore["model"] else ""
        )
        lines += [
            "",
            f"## Hard-negative mining (teacher `{mining['teacher']}`, margin {mining['margin']}, "
            f"k {mining['num_negatives']}{rescored})",
            "",
            "Each candidate is counted under the first rule that removed it.",
            "",
            _row(
                [
                    "source",
                    "queries",
                    "pool",
                    "candidates",
                    "dropped: positive",
                    "dropped: shared relation",
                    "dropped: margin",
                    "dropped: rescore",
                    "mined",
                    "rows short of k",
                ]
            ),
            _row(["---"] + ["---:"] * 9),
        ]
        for name, m in mined.items():
            cells = [m["queries"], m["pool"], m["candidates"], m["dropped_positive"], _relations(m)]
            cells += [m["dropped_margin"], m["dropped_rescore"], m["mined"], m["rows_short"]]
            lines.append(_row([name, *cells]))

    warnings = stats.get("warnings", [])
    if warnings:
        lines += ["", "## Warnings", ""]
        lines += [f"- {w}" for w in warnings]

    malformed = {n: s["malformed_example"] for n, s in sources.items() if s["malformed_example"]}
    if malformed:
        lines += ["", "## Malformed rows (first example per source)", ""]
        lines += [f"- {n}: {e['where']}: {e['error']}" for n, e in malformed.items()]
    return "\n".join(lines) + "\n"


# A source whose split differs from its manifest's expected_rows by more than this is not the data the
# manifest describes: another revision (all-nli's triplet config halved between revisions) or a broken copy.
SIZE_TOLERANCE = 0.01


def size_warnings(sources: dict) -> list[str]:
    """One warning per source whose whole split is far from its manifest's expected_rows (unknown sizes, as a
    streamed source without dataset info has, are not compared)."""
    warnings = []
    for name, s in sources.items():
        expected, available = s["expected_rows"], s["rows_available"]
        if expected and available is not None and abs(available - expected) > SIZE_TOLERANCE * expected:
            warnings.append(
                f"{name}: the source has {available:,} rows, its manifest expects {expected:,} "
                f"(off by more than {SIZE_TOLERANCE:.0%}): another revision than the manifest describes?"
            )
    return warnings


# How a drop reason reads in a sentence ("4 empty", "2 held out for testing").
REASON_WORDS = {
    "malformed": "malformed",
    "missing_column": "missing a column",
    "empty": "empty",
    "too_short": "too short",
    "too_long": "too long",
    "same_as_query": "positive equal to the anchor",
    "low_score": "scored too low",
    "held_out": "held out for testing",
    "leakage": "an evaluation text",
    "duplicate": "duplicated",
}


def source_summary(counts: StagedCounts) -> str:
    """`64 rows read, 54 kept, 10 dropped: 6 held out for testing (pairs.jsonl:3, pairs.jsonl:7, ...); 4
    duplicated (...)`: what stage 1 did with a source, the first rows each reason dropped named."""
    parts = []
    for reason in REASONS:
        if n := counts["dropped"].get(reason, 0):
            examples = counts.get("dropped_examples", {}).get(reason, [])
            shown = ", ".join(examples[:3]) + (", ..." if n > 3 else "")
            parts.append(f"{n:,} {REASON_WORDS[reason]}" + (f" ({shown})" if examples else ""))
    dropped = sum(counts["dropped"].values())
    return f"{counts['rows_read']:,} rows read, {counts['kept']:,} kept, {dropped:,} dropped" + (
        f": {'; '.join(parts)}" if parts else ""
    )


def mining_summary(stats: Mapping[str, Any]) -> list[str]:
    """One line per mined source: what each rule removed, for the build's closing message."""
    lines = []
    for name, s in stats["sources"].items():
        m = s["mining"]
        if m:
            lines.append(
                f"{name}: {m['candidates']} candidates for {m['queries']} queries; removed as positive "
                f"{m['dropped_positive']}, shared relation {_relations(m)}, margin {m['dropped_margin']}, "
                f"rescore {m['dropped_rescore']}; mined {m['mined']} ({m['rows_short']} rows short of k)"
            )
    return lines


def _relations(mining: dict) -> str:
    """`total (kind n, ...)` for the candidates removed by shared relations."""
    kinds = mining["dropped_relation"]
    detail = ", ".join(f"{kind} {n}" for kind, n in kinds.items())
    return f"{sum(kinds.values())} ({detail})" if kinds else "0"


def _pct(p: dict) -> str:
    return "/".join(str(p[k]) for k in ("p5", "p50", "p95", "p99")) if p else "-"


def _read_stats(data_path: Path) -> Any:
    """The stats.json of the build at `data_path` (OSError where missing, JSONDecodeError where torn)."""
    return json.loads((Path(data_path) / "stats.json").read_text(encoding="utf-8"))


def pairs_summary(data_path: Path) -> str | None:
    """One sentence for the model card: the pairs files the build at `data_path` was made from and what it did
    with their rows; None for a build of manifests (or without stats)."""
    try:
        stats = _read_stats(data_path)
        files = stats["config"].get("pairs") or []
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return None
    if not files:
        return None
    held = " (one anchor in ten held out as the test split)" if stats["config"].get("holdout") else ""
    counts = "; ".join(f"{name}: {source_summary(source)}" for name, source in stats["sources"].items())
    return f"Built from your pairs {', '.join(f'`{f}`' for f in files)}{held}: {counts}."


def leakage_summary(data_path: Path) -> str | None:
    """One sentence for the model card: the evaluation texts the build at `data_path` kept out of training
    (per guarded set or benchmark task, the rows dropped), and the benchmark tasks it could not guard; None
    when the build's stats.json is missing or predates the guard."""
    try:
        stats = _read_stats(data_path)
        guarded, dropped = stats["config"]["guarded_texts"], stats["total"]["rows_dropped_for_leakage"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return None
    sets = ", ".join(f"{name} {dropped.get(name, 0)} rows ({n:,} texts)" for name, n in guarded.items())
    benchmark = stats["config"].get("eval_benchmark")
    summary = (
        "Leakage guard: training rows whose query or positive is an evaluation text were removed"
        + (f" (benchmark `{benchmark}`, a set per task)" if benchmark else "")
        + f": {sets}."
    )
    skipped = stats["config"].get("eval_benchmark_skipped") or {}
    if skipped:
        summary += f" Not guarded (data unavailable at build time): {', '.join(skipped)}."
    return summary
