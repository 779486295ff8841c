"""`neoembed mteb-eval`'s settings: which models and tasks to run, where, and under which protocol
(`EvalSettings`); the command's options are generated from these fields (`neoembed.cli.options`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict, Field

from neoembed.compilation import InferenceCompile
from neoembed.data import ColumnMap
from neoembed.evaluation.models import EvalSettings
from neoembed.recipes import CommaSeparated, StrictSettings


class MtebEvalSettings(StrictSettings):
    model_config = ConfigDict(frozen=True)

    models: tuple[str, ...] = ()
    """Repeatable. A sentence-transformers dir or hub id, 'minilm', a transformers encoder dir or hub id
    (pooled per --pooling), or 'bm25'; none: what `neoembed contrastive` exported here, its base, and bm25."""
    tasks: CommaSeparated[tuple[str, ...]] = ()
    """Comma-separated task names (local WordNet tasks or mteb tasks), or your test set's path: a BEIR folder
    (corpus.jsonl, queries.jsonl, qrels/test.tsv) or a pairs file, whose held-out anchors are the queries."""
    columns: ColumnMap = Field(default_factory=dict)
    """A pairs file's columns where they are not anchor/query, positive: e.g. query=question,positive=answer."""
    benchmark: str | None = None
    """An mteb benchmark: 'MTEB(eng, v2)' (current English leaderboard), 'MTEB(eng, v1)' (the NeoBERT paper's),
    ... or 'neoembed-local' (offline; the default with no --tasks or --task-types)."""
    task_types: CommaSeparated[tuple[str, ...]] = ()
    """Comma-separated types (Retrieval,STS,...): filters the selection (alone: MTEB(eng, v2))."""
    output: Path = Path("runs/mteb")
    """Results cache and summaries."""
    prompts_file: Path | None = None
    """JSON/YAML file: prompt key -> prompt text."""
    prompt: tuple[str, ...] = ()
    """Repeatable KEY=TEXT prompt (none by default)."""
    datasets_dir: Path | None = None
    """Local copies of mteb datasets as DIR/<org>/<name> (e.g. DIR/mteb/sts12-sts)."""
    device: str | None = None
    """Torch device (default: sentence-transformers' choice)."""
    threads: int | None = Field(None, ge=1)
    """torch CPU threads (default: torch's)."""
    compile: InferenceCompile = "auto"
    compare: tuple[str, ...] = ()
    """Repeatable MODEL:BASELINE (labels as in the table; BASELINE 'best': the best other model): the paired
    differences tabled and drawn (default: every model against the first)."""
    protocol: EvalSettings = EvalSettings()
