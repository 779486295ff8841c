"""`neoembed build-data`: manifests -> parquet shards of (query, positive, negatives, source) + stats.

Every record also carries the `text_key` of each of its texts (`query_key`, `positive_key`, `negative_keys`):
the trainer's sampler and loss tell texts apart by them.

Stage 1 (`prepare`) stages every selected source in manifest order: mapped, normalised, filtered, leakage-
guarded and deduplicated across sources. Stage 2 cuts each staged source into parts of `rows_per_shard` rows;
each part (source x part index) is an independent unit: its negatives are mined against the pool of its own
positives, and it is written as `<out>/<source>/part-NNNNN.parquet` with a JSON marker. `--shard i/N` builds
the units whose running index is i modulo N, so N machines split the expensive mining; whichever finishes
last (or `--merge-stats`) writes `stats.json` and `stats.md` once every unit is present. Every file is
written atomically and carries a fingerprint of its inputs, so a killed build resumes where it stopped and a
rebuild with the same inputs is byte-identical.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BeforeValidator, ConfigDict, Field, PlainSerializer, field_validator, model_validator
from tqdm import tqdm

from neoembed.data.key_set import KeySet
from neoembed.data.leakage import GuardedTexts, leak_guard
from neoembed.data.manifest import Manifest, StsRule, file_manifest, load_manifests
from neoembed.data.mining import Miner, MiningConfig, MiningStats
from neoembed.data.normalize import text_key
from neoembed.data.pairs_file import ColumnMap, PairsFileError, open_pairs
from neoembed.data.prepare import (
    FORMAT_VERSION,
    StagedSource,
    prepare_source,
    staging_paths,
)
from neoembed.data.records import part_damage
from neoembed.data.relations import Keys
from neoembed.data.shards import Share, check_share_count, resolve_share
from neoembed.data.stats import (
    BuildStats,
    build_totals,
    mining_summary,
    render_markdown,
    size_warnings,
    source_stats,
    source_summary,
)
from neoembed.data.truncate import Truncator
from neoembed.errors import InputError
from neoembed.packaged import manifests_dir
from neoembed.recipes import StrictSettings, split_commas
from neoembed.run_files import append_jsonl, file_checksum, one_writer, write_json, write_parquet, write_text

log = logging.getLogger("neoembed.data")

RECORD_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("positive", pa.string()),
        ("negatives", pa.list_(pa.string())),
        ("source", pa.string()),
        ("query_key", pa.int64()),
        ("positive_key", pa.int64()),
        ("negative_keys", pa.list_(pa.int64())),
    ]
)


def _parse_shard(value):
    """`"i/N"` from the command line -> (i, N)."""
    if not isinstance(value, str):
        return value
    index, sep, count = value.partition("/")
    if not sep or not index.isdigit() or not count.isdigit():
        raise ValueError(f"expected i/N, got {value!r}")
    return int(index), int(count)


Shard = Annotated[
    tuple[int, int],
    BeforeValidator(_parse_shard),
    PlainSerializer(lambda shard: f"{shard[0]}/{shard[1]}", when_used="json"),
]


class BuildConfig(StrictSettings):
    """What `build-data` builds; each field is the CLI option of the same name (mining's too)."""

    model_config = ConfigDict(frozen=True)

    manifests: Path = Field(default_factory=manifests_dir)
    """Directory of source manifests (default: the packaged set)."""
    pairs: tuple[Path, ...] = ()
    """Your own pairs instead of manifests: .jsonl, .json, .csv, .tsv or .parquet files, folders of them, or
    datasets save_to_disk folders; each is a source named after its file (repeatable)."""
    columns: ColumnMap = Field(default_factory=dict)
    """Your files' columns where they are not anchor/query, positive, negative(s): e.g.
    query=question,positive=answer,negatives=wrong (negatives may repeat)."""
    holdout: bool = True
    """Keep one anchor in ten of your pairs out of training: the test split `neoembed mteb-eval -t FILE`
    scores; --no-holdout trains on every row (your test set is elsewhere)."""
    out: Path | None = None
    """Output directory (parquet shards per source, stats.json/md); needed to build."""
    sources: tuple[str, ...] | None = None
    """Comma-separated source names, or 'all' (every manifest)."""
    local_data: Path | None = None
    """Offline copies: DIR/<source> replaces the hub dataset of that source."""
    eval_texts: tuple[Path, ...] = ()
    """Leakage guard beyond FOLDOC's held-out set: .txt (a text a line) or .jsonl ('text') files; repeatable."""
    eval_benchmark: str | None = None
    """Leakage guard on the evaluation texts of an mteb benchmark ("MTEB(eng, v2)") or comma list of tasks."""
    eval_benchmark_missing: Literal["error", "skip"] = "error"
    """A benchmark task whose data cannot be loaded: stop (error) or build without it, reported (skip)."""
    max_tokens: int = Field(1024, ge=0)
    """Cut longer texts to this many tokens ([CLS]/[SEP] included), at a token boundary; 0 keeps them whole."""
    tokenizer: str = "minilm"
    """Tokenizer counting --max-tokens (default: the packaged MiniLM's, bert-base-uncased as in NeoBERT)."""
    both_directions: bool = False
    """Also write each row of a symmetric source (manifest `symmetric: true`) as (positive, query)."""
    max_rows: int | None = Field(None, ge=1)
    """Rows read per source; 0 reads all."""
    budgets: bool = True
    """Cap each source at its manifest's budget (the paper's ~9M mix); --no-budgets reads whole sources."""
    sts_rule: StsRule = "intended"
    """STS pairs kept: 'intended' (score >= 4 of 5) or 'release' (every pair, as the code release trained)."""
    rows_per_shard: int = Field(100_000, ge=1)
    """Rows per output part."""
    shard: Shard | None = None
    """Build only units i, i+N, ... (i/N) here (default: the share torchrun, a SLURM array or a Kubernetes
    Indexed Job gives this process, else the whole build)."""
    mine: bool = True
    """Mine negatives for sources without them."""
    mining: MiningConfig = MiningConfig()

    @field_validator("sources", mode="before")
    @classmethod
    def _source_list(cls, value):
        names = split_commas(value)
        return None if names == ["all"] else names

    @field_validator("max_rows", mode="before")
    @classmethod
    def _zero_reads_all(cls, value):
        return None if value == 0 else value

    @field_validator("local_data")
    @classmethod
    def _local_data_exists(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_dir():
            raise ValueError(f"no such directory: {path}")
        return path

    @field_validator("pairs")
    @classmethod
    def _pairs_exist(cls, paths: tuple[Path, ...]) -> tuple[Path, ...]:
        missing = [path for path in paths if not path.exists()]
        if missing:
            raise ValueError(f"no such file or folder: {missing[0]}")
        return paths

    @model_validator(mode="after")
    def _pairs_or_manifests(self):
        if self.pairs and self.sources:
            raise ValueError("sources name manifests; with pairs files (--from) the files are the sources")
        if self.columns and not self.pairs:
            raise ValueError("columns maps your pairs files' columns: give the files (--from)")
        return self

    @field_validator("eval_texts")
    @classmethod
    def _files(cls, paths: tuple[Path, ...]) -> tuple[Path, ...]:
        missing = [path for path in paths if not path.is_file()]
        if missing:
            raise ValueError(f"not a file: {missing[0]}")
        return paths

    @field_validator("shard")
    @classmethod
    def _shard_in_range(cls, shard: tuple[int, int] | None) -> tuple[int, int] | None:
        if shard is not None and not 0 <= shard[0] < shard[1]:
            raise ValueError(f"expected i/N with 0 <= i < N, got {shard[0]}/{shard[1]}")
        return shard


@dataclass(frozen=True)
class Unit:
    source: str
    part: int
    parts: int
    start: int
    stop: int
    fingerprint: str
    mine: bool

    @property
    def path(self) -> Path:
        return Path(self.source) / f"part-{self.part:05d}.parquet"


def _sha(*items) -> str:
    return hashlib.sha256(json.dumps(items, sort_keys=True, default=str).encode()).hexdigest()


class Build:
    def __init__(self, config: BuildConfig, benchmark: GuardedTexts | None = None):
        if bool(config.eval_benchmark) != (benchmark is not None):
            raise InputError(
                "eval_benchmark and the benchmark's texts go together: collect them with "
                "neoembed.evaluation.benchmark_texts(config.eval_benchmark)",
                param="eval_benchmark",
            )
        if config.out is None:
            raise InputError("a build needs its output directory", param="--out")
        self.config = config
        self.out = Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.manifests = (
            pair_manifests(config.pairs, config.columns)
            if config.pairs
            else load_manifests(config.manifests, list(config.sources) if config.sources else None)
        )
        self.log_path = self.out / "build.jsonl"
        self._miner: Miner | None = None
        self.guard = leak_guard(config.eval_texts, benchmark)
        self.truncator = Truncator(config.tokenizer, config.max_tokens) if config.max_tokens else None
        if self.guard.skipped:
            self.log("eval_benchmark_skipped", tasks=self.guard.skipped)

    def log(self, event: str, **fields) -> None:
        append_jsonl(self.log_path, {"time": round(time.time(), 3), "event": event, **fields})

    # Stage 1 ---------------------------------------------------------------------------------------------

    def prepare(self) -> dict[str, StagedSource]:
        seen = KeySet()
        staged, previous = {}, ""
        for name, (manifest, manifest_sha) in self.manifests.items():
            cap = self.cap(manifest)
            holdout = manifest.kind == "file" and self.config.holdout  # the test split of a pairs file
            truncation = self.truncator and (self.config.tokenizer, self.config.max_tokens)
            fingerprint = _sha(
                FORMAT_VERSION,
                previous,
                manifest_sha,
                self.guard.digest,
                cap,
                self.config.sts_rule,
                truncation,
                self.config.both_directions,
                holdout,
            )
            started, cpu = time.perf_counter(), time.process_time()
            prepared = staged[name] = prepare_source(
                manifest.with_sts_rule(self.config.sts_rule),
                fingerprint,
                self.out,
                seen,
                self.guard,
                self.config.local_data,
                cap,
                self.truncator,
                self.config.both_directions,
                holdout,
            )
            if manifest.kind == "file" and not prepared["kept"]:
                raise PairsFileError(
                    f"{manifest.path}: no usable pair: {source_summary(prepared)}; fix the rows named",
                    param=manifest.path,
                )
            self.log(
                "prepare",
                source=name,
                seconds=round(time.perf_counter() - started, 3),
                cpu_seconds=round(time.process_time() - cpu, 3),  # on a shared machine, the stage's own cost
                rows_read=prepared["rows_read"],
                kept=prepared["kept"],
                dropped=prepared["dropped"],
            )
            previous = fingerprint
        return staged

    def cap(self, manifest: Manifest) -> int | None:
        """Rows read from a source: the smaller of `--max-rows` and its budget (unless --no-budgets)."""
        caps = [
            c
            for c in (self.config.max_rows, manifest.budget if self.config.budgets else None)
            if c is not None
        ]
        return min(caps) if caps else None

    # Stage 2 ---------------------------------------------------------------------------------------------

    def units(self, staged: dict[str, StagedSource]) -> list[Unit]:
        units, size = [], self.config.rows_per_shard
        mining = self.config.mining.model_dump()
        for name, (manifest, _) in self.manifests.items():
            rows = staged[name]["kept"]
            parts = max(1, -(-rows // size))
            mine = self.config.mine and manifest.mines_by_default
            for part in range(parts):
                fingerprint = _sha(staged[name]["fingerprint"], part, size, mine and mining)
                units.append(
                    Unit(name, part, parts, part * size, min(rows, (part + 1) * size), fingerprint, mine)
                )
        return units

    def build_unit(self, unit: Unit) -> None:
        marker = (self.out / unit.path).with_suffix(".json")
        if marker.exists() and json.loads(marker.read_text())["fingerprint"] == unit.fingerprint:
            if part_damage(self.out / unit.path, json.loads(marker.read_text()).get("xxh3")) is None:
                return
            log.warning("%s does not hold the rows this build wrote there; building it again", unit.path)
            self.log("part_rebuilt", source=unit.source, part=unit.part)
        started = time.perf_counter()
        staging, _ = staging_paths(self.out, unit.source)
        table = _read_rows(staging, unit.start, unit.stop)
        negatives = table["negatives"].to_pylist()
        stats = MiningStats()
        if unit.mine and table.num_rows > 1:
            workdir = self._workdir(unit)
            mined, stats = self.miner.mine(
                table["query"].to_pylist(),
                table["query_key"].to_numpy(),
                table["positive"].to_pylist(),
                table["positive_key"].to_numpy(),
                self._relations(unit.source, table),
                workdir,
            )
            negatives = [_merge(given, new) for given, new in zip(negatives, mined, strict=True)]
        negative_keys = [[text_key(text) for text in row] for row in negatives]
        records = (
            table.select(["query", "positive", "source", "query_key", "positive_key"])
            .append_column("negatives", pa.array(negatives, pa.list_(pa.string())))
            .append_column("negative_keys", pa.array(negative_keys, pa.list_(pa.int64())))
        )
        (self.out / unit.source).mkdir(exist_ok=True)
        part = self.out / unit.path
        write_parquet(part, records.select(RECORD_SCHEMA.names).cast(RECORD_SCHEMA))
        counts = np.bincount([len(n) for n in negatives], minlength=1) if negatives else np.zeros(1, int)
        summary = dataclasses.asdict(stats)
        seconds = summary.pop("seconds")
        write_json(
            marker,
            {
                "fingerprint": unit.fingerprint,
                "rows": table.num_rows,
                "xxh3": file_checksum(part),  # checked before the part is kept on a re-run, or trained on
                "negatives_histogram": {str(i): int(c) for i, c in enumerate(counts) if c},
                "mining": summary if unit.mine else None,
            },
        )
        if unit.mine:
            shutil.rmtree(self._workdir(unit), ignore_errors=True)
        self.log(
            "part",
            source=unit.source,
            part=unit.part,
            rows=table.num_rows,
            seconds=round(time.perf_counter() - started, 3),
            mining_seconds={k: round(v, 3) for k, v in seconds.items()},
            **({"mined": stats.mined, "dropped_margin": stats.dropped_margin} if unit.mine else {}),
        )

    def _relations(self, source: str, table: pa.Table) -> dict[str, Keys]:
        """Per relation kind of the source's mapping, each staged row's keys."""
        column = table["relations"].combine_chunks()
        kinds = self.manifests[source][0].mapping.relations
        return {kind: Keys.from_arrow(pc.list_element(column, i)) for i, kind in enumerate(kinds)}

    def _workdir(self, unit: Unit) -> Path:
        """Where a unit's embeddings live while it is mined; the fingerprint keeps stale ones from being reused."""
        return self.out / "work" / unit.source / f"part-{unit.part:05d}-{unit.fingerprint[:12]}"

    @property
    def miner(self) -> Miner:
        if self._miner is None:
            self._miner = Miner(self.config.mining)
        return self._miner

    # Stats -----------------------------------------------------------------------------------------------

    def merge_stats(self, staged: dict[str, StagedSource], units: list[Unit]) -> BuildStats | None:
        """Write stats.json and stats.md once every unit is built; None (and nothing written) before that."""
        markers: dict[str, list[dict]] = {}
        for unit in units:
            marker = (self.out / unit.path).with_suffix(".json")
            if not marker.exists() or json.loads(marker.read_text())["fingerprint"] != unit.fingerprint:
                return None
            markers.setdefault(unit.source, []).append(json.loads(marker.read_text()))
        for unit in units:  # parts left over from an earlier build with more parts
            for stale in (self.out / unit.source).glob("part-*"):
                if int(stale.name[5:10]) >= unit.parts:
                    stale.unlink(missing_ok=True)  # another shard may have removed it already
        sources = {
            name: source_stats(manifest, self.config.budgets, staged[name], markers[name])
            for name, (manifest, _) in self.manifests.items()
        }
        stats = BuildStats(
            build_hash=_sha([u.fingerprint for u in units]),
            config={
                "max_rows": self.config.max_rows,
                "budgets": self.config.budgets,
                "sts_rule": self.config.sts_rule,
                "rows_per_shard": self.config.rows_per_shard,
                "mining": self.config.mining.model_dump() if self.config.mine else None,
                "eval_texts": [str(p) for p in self.config.eval_texts],
                "eval_benchmark": self.config.eval_benchmark,
                "guarded_texts": self.guard.sizes(),  # leakage guard: held-out set (or task) -> distinct texts
                "eval_benchmark_skipped": self.guard.skipped,  # tasks whose data could not be loaded -> why
                "max_tokens": self.config.max_tokens or None,
                "tokenizer": self.config.tokenizer if self.config.max_tokens else None,
                "both_directions": self.config.both_directions,
                "pairs": [str(p) for p in self.config.pairs],
                "holdout": self.config.holdout if self.config.pairs else None,
            },
            sources=sources,
            total=build_totals(sources),
            warnings=size_warnings(sources),
        )
        write_json(self.out / "stats.json", stats)
        write_text(self.out / "stats.md", render_markdown(stats))
        return stats

    def run(self, share: Share, merge_only: bool = False) -> BuildStats | None:
        """Build this share's units and, once every unit of the build is done, the stats (None before that).
        Ranks of one launch wait for each other: the first stages the sources before the others read them,
        and merges the stats after all have built their units."""
        ranks = _RankBarrier() if share.ranks else None
        if ranks and share.index != 0:
            ranks.wait()  # the first rank stages the sources
        staged = self.prepare()
        if ranks and share.index == 0:
            ranks.wait()
        units = self.units(staged)
        if not merge_only:
            mine = units[share.index :: share.count]
            for unit in tqdm(mine, desc=f"parts (shard {share.index}/{share.count})", unit="part"):
                self.build_unit(unit)
        if ranks:
            ranks.release()  # every rank's units are written
            if share.index != 0:
                return None
        stats = self.merge_stats(staged, units)
        self.log("done" if stats else "shard_done", shard=f"{share.index}/{share.count}", units=len(units))
        return stats


def _read_rows(path: Path, start: int, stop: int) -> pa.Table:
    """Rows [start, stop) of a parquet file, reading only the row groups that hold them (bounded memory)."""
    file = pq.ParquetFile(path)
    groups, first, offset = [], None, 0
    for index in range(file.num_row_groups):
        size = file.metadata.row_group(index).num_rows
        if offset + size > start and offset < stop:
            groups.append(index)
            first = offset if first is None else first
        offset += size
    if first is None:  # no row group overlaps [start, stop)
        return file.schema_arrow.empty_table()
    return file.read_row_groups(groups).slice(start - first, stop - start)


def _merge(given: list[str], mined: list[str]) -> list[str]:
    """Given negatives first, then mined ones that are not copies of a given one."""
    if not given:
        return mined
    keys = {text_key(t) for t in given}
    return given + [t for t in mined if text_key(t) not in keys]


@dataclass(frozen=True)
class BuildResult:
    """A finished build: where it is, its totals, and its whole record (stats.json)."""

    out: Path
    rows_read: int
    rows_out: int
    negatives_per_row: float
    warnings: list[str]  # sizes off their manifests' expected rows, and the like
    mining: list[str]  # one line per mined source: what each rule removed
    sources: list[str]  # one line per source: rows read, kept, dropped and why (`source_summary`)
    stats: BuildStats  # stats.json as written: per source, the config, the totals

    @classmethod
    def of(cls, out: Path, stats: BuildStats) -> BuildResult:
        total = stats["total"]
        return cls(
            Path(out),
            total["rows_read"],
            total["rows_out"],
            total["negatives_per_row"],
            list(stats["warnings"]),
            mining_summary(stats),
            [f"{name}: {source_summary(source)}" for name, source in stats["sources"].items()],
            stats,
        )


def build(
    config: BuildConfig, merge_only: bool = False, benchmark: GuardedTexts | None = None
) -> BuildResult | None:
    """Run a build (or this shard's part of one); returns the result once the whole build is complete.
    `benchmark` holds the texts of `config.eval_benchmark`'s tasks (`neoembed.evaluation.benchmark_texts`)."""
    if config.out is None:
        raise InputError("an output directory is needed to build (--out)", param="--out")
    share = resolve_share(config.shard)
    # Shares of one build run side by side, each under a lock of its own.
    lock = "build" if share.count == 1 else f"build-shard-{share.index}-of-{share.count}"
    created = first_missing(Path(config.out))
    try:
        with one_writer(config.out, lock, param="--out"):
            check_share_count(config.out, share)
            stats = Build(config, benchmark).run(share, merge_only=merge_only)
    except PairsFileError:
        # Your file could not be read: nothing of the build is left behind (it had no other work to keep).
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
    return None if stats is None else BuildResult.of(config.out, stats)


def first_missing(path: Path) -> Path | None:
    """The outermost of `path` and its parents that does not exist yet (what making `path` creates)."""
    missing = None
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing = candidate
    return missing


def pair_manifests(paths: tuple[Path, ...], columns: dict) -> dict[str, tuple[Manifest, str]]:
    """Your pairs files as sources, by their names; two files of one name are refused."""
    manifests: dict[str, tuple[Manifest, str]] = {}
    for path in paths:
        manifest, sha = file_manifest(open_pairs(path, columns))
        if manifest.name in manifests:
            raise InputError(
                f"{path} and {manifests[manifest.name][0].path} are both source {manifest.name!r}: rename one",
                param="--from",
            )
        manifests[manifest.name] = (manifest, sha)
    return manifests


class _RankBarrier:
    """The ranks of one torchrun launch waiting for each other (gloo: any device)."""

    def __init__(self) -> None:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("gloo")
        self._dist = dist

    def wait(self) -> None:
        self._dist.barrier()

    def release(self) -> None:
        """Wait for every rank, then leave the process group, so no rank exits with a peer still attached."""
        from neoembed.training import release_process_group

        release_process_group()
