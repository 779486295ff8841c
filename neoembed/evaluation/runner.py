"""Run several models on several tasks through ``mteb.evaluate``, resumably, and summarise.

Results live in an mteb ``ResultCache`` under the run's output directory
(``results/<model>/<revision>/experiments/<settings>/<task>.json``): a task already finished for the same
model weights and scoring settings is skipped without loading the model, and a crashed run resumes where
it stopped (mteb also saves each finished subset of a task). A task that fails is recorded and the others
still run. Each task's outcome is appended to ``mteb_eval.jsonl`` beside the summary.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from neoembed.mteb_setup import mteb

from mteb import AbsTask, ResultCache, TaskResult
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from neoembed.compilation import CompileSetting
from neoembed.errors import InputError
from neoembed.evaluation.models import EvalSettings, ModelLoadError, ModelSpec, load_model, resolve_model
from neoembed.evaluation.significance import (
    CONFIDENCE,
    N_RESAMPLES,
    SEED,
    Difference,
    RowInput,
    compare_pair,
    example_scores,
)
from neoembed.evaluation.summary import Summary, summarize, write_summary
from neoembed.evaluation.tasks import leaf_tasks, supports_lexical_search
from neoembed.run_files import append_jsonl, one_writer

LOG_NAME = "mteb_eval.jsonl"


@dataclass(frozen=True)
class TaskOutcome:
    model: str
    task: str
    status: str  # "done" | "cached" | "failed" | "n/a"
    seconds: float = 0.0
    main_score: float | None = None  # for an aggregate, the mean over its subtasks
    error: str | None = None
    hint: str | None = None  # what to do about the error


@dataclass
class RunReport:
    outcomes: list[TaskOutcome]
    summary: Summary
    files: list[Path]

    @property
    def failed(self) -> list[TaskOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]


def resolve_models(names: Sequence[str], settings: EvalSettings) -> list[ModelSpec]:
    """Resolve every model name before any work, with summary labels that tell the models apart."""
    specs = [resolve_model(name, settings) for name in names]
    return [ModelSpec(label, s.kind, s.source, s.meta) for label, s in zip(distinct_labels(specs), specs)]


def distinct_labels(specs: Sequence[ModelSpec]) -> list[str]:
    """Each model's summary label. Directories labelled by a name they share (runs/a/model, runs/b/model)
    gain as many parent folders as tell them apart (a/model, b/model); a model named twice gets #2, #3."""
    dirs = [_labelled_dir(spec) for spec in specs]  # one filesystem look per model, not one per pair
    labels = []
    for spec, path in zip(specs, dirs, strict=True):
        rivals = {d for other, d in zip(specs, dirs, strict=True) if other.label == spec.label and d}
        labels.append(spec.label if path is None else _shortest_distinct_tail(path, rivals))
    seen: set[str] = set()
    for i, label in enumerate(labels):
        unique, n = label, 2
        while unique in seen:
            unique, n = f"{label}#{n}", n + 1
        seen.add(unique)
        labels[i] = unique
    return labels


def _labelled_dir(spec: ModelSpec) -> Path | None:
    """The model's directory, where its label is that directory's name."""
    path = Path(spec.source).resolve() if spec.source else None
    return path if path is not None and path.is_dir() and path.name == spec.label else None


def _shortest_distinct_tail(path: Path, rivals: set[Path]) -> str:
    others = [other.parts for other in rivals if other != path]
    for k in range(1, len(path.parts) + 1):
        if all(other[-k:] != path.parts[-k:] for other in others):
            return "/".join(path.parts[-k:])
    return str(path)


def cached_result(cache: ResultCache, spec: ModelSpec, task_name: str) -> TaskResult | None:
    return cache.load_task_result(task_name, spec.meta)


def is_finished(cache: ResultCache, spec: ModelSpec, task: AbsTask) -> bool:
    """Every result file `task` needs exists and covers all its splits and subsets."""
    for leaf in leaf_tasks([task]):
        result = cached_result(cache, spec, leaf.metadata.name)
        if result is None or result.get_missing_evaluations(leaf):
            return False
    return True


def drop_stale(cache: ResultCache, spec: ModelSpec, task: AbsTask) -> None:
    """Remove the cached results of `task` scored on another revision of its data (your test set changed
    since): mteb would keep them as finished."""
    for leaf in leaf_tasks([task]):
        result = cached_result(cache, spec, leaf.metadata.name)
        if result is not None and result.dataset_revision != leaf.metadata.revision:
            cache.get_task_result_path(leaf.metadata.name, spec.meta).unlink(missing_ok=True)


OFFLINE_HINT = (
    "mteb task data comes from the Hugging Face hub, which is unreachable here and its local cache lacks "
    "these datasets: run once with hub access, point HF_HOME at a cache that has them, or pass local copies "
    "with --datasets-dir (the WordNet tasks need neither)"
)


def _is_offline_error(error: str) -> bool:
    return any(marker in error for marker in ("OfflineModeIsEnabled", "Couldn't reach", "LocalEntryNotFound"))


def predictions_dir(cache: ResultCache, spec: ModelSpec, task_name: str) -> Path:
    """Where mteb saves `spec`'s per-example predictions on `task_name`: the result file's place under
    ``predictions/`` instead of ``results/`` (inside ``results/`` mteb's cache would read them as results)."""
    result_dir = cache.get_task_result_path(task_name, spec.meta).parent
    return cache.cache_path / "predictions" / result_dir.relative_to(cache.cache_path / "results")


def _evaluate(
    model, task: AbsTask, spec: ModelSpec, settings: EvalSettings, cache: ResultCache
) -> TaskOutcome:
    """Run `task` (an aggregate as its subtasks: the summary averages them, and mteb would cache a failed
    aggregate as if it were finished)."""
    start = time.perf_counter()
    result = mteb.evaluate(
        model,
        leaf_tasks([task]),
        encode_kwargs=settings.encode_kwargs(),
        cache=cache,
        prediction_folder=predictions_dir(cache, spec, task.metadata.name),
        overwrite_strategy="only-missing",
        raise_error=False,
        show_progress_bar=False,
        co2_tracker=False,
    )
    seconds = round(time.perf_counter() - start, 3)
    if result.exceptions or not result.task_results:
        errors = [e.exception.strip().splitlines()[-1] for e in result.exceptions if e.exception.strip()]
        error = "; ".join(dict.fromkeys(errors)) or "no result produced"
        hint = OFFLINE_HINT if _is_offline_error(error) else None
        return TaskOutcome(spec.label, task.metadata.name, "failed", seconds, error=error, hint=hint)
    score = sum(r.get_score() for r in result.task_results) / len(result.task_results)
    return TaskOutcome(spec.label, task.metadata.name, "done", seconds, float(score))


def run_evaluation(
    specs: Sequence[ModelSpec],
    tasks: Sequence[AbsTask],
    settings: EvalSettings,
    out_dir: Path,
    *,
    device: str | None = None,
    compile: CompileSetting = "auto",
    pairs: Sequence[str] = (),
) -> RunReport:
    """Evaluate every model on every task (skipping finished ones), then write the summary files with the
    paired differences of `pairs` (`comparison_pairs`). One run writes an output directory at a time.
    `device` and `compile` say how each model runs; neither changes its results' identity."""
    check_pairs(pairs, [spec.label for spec in specs])
    with one_writer(out_dir, "mteb-eval", param="--output"):
        return _evaluate_all(specs, tasks, settings, out_dir, device, compile, pairs)


def _evaluate_all(
    specs,
    tasks,
    settings: EvalSettings,
    out_dir: Path,
    device: str | None,
    compile: CompileSetting,
    pairs: Sequence[str],
) -> RunReport:
    cache = ResultCache(out_dir)
    outcomes: list[TaskOutcome] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns) as progress:
        bar = progress.add_task("mteb-eval", total=len(specs) * len(tasks))
        for spec in specs:
            model, load_error = None, None
            for task in tasks:
                name = task.metadata.name
                progress.update(bar, description=f"{spec.label}: {name}")
                drop_stale(cache, spec, task)
                if spec.is_lexical and not supports_lexical_search(task):
                    outcome = TaskOutcome(spec.label, name, "n/a")
                elif is_finished(cache, spec, task):
                    outcome = TaskOutcome(spec.label, name, "cached")
                else:
                    if model is None and load_error is None:  # load lazily: a fully cached model never loads
                        try:
                            model = load_model(spec, settings, device, compile)
                        except ModelLoadError as err:
                            load_error = str(err)
                    if load_error is not None:
                        outcome = TaskOutcome(spec.label, name, "failed", error=load_error)
                    else:
                        outcome = _evaluate(model, task, spec, settings, cache)
                outcomes.append(outcome)
                append_jsonl(out_dir / LOG_NAME, {"time": time.time(), **asdict(outcome)})
                progress.advance(bar)
            del model
    summary = summarize_cached(specs, tasks, cache)
    summary.differences = compare_cached(specs, summary, cache, pairs)
    files = write_summary(summary, out_dir)
    files.append(_write_settings(specs, tasks, settings, out_dir))
    return RunReport(outcomes, summary, files)


def summarize_cached(specs: Sequence[ModelSpec], tasks: Sequence[AbsTask], cache: ResultCache) -> Summary:
    """The summary of whatever the cache holds for `specs` on `tasks`."""
    results = {}
    for spec in specs:
        found = {t.metadata.name: cached_result(cache, spec, t.metadata.name) for t in leaf_tasks(tasks)}
        results[spec.label] = {name: result for name, result in found.items() if result is not None}
    not_applicable = {
        spec.label: {t.metadata.name for t in tasks if not supports_lexical_search(t)}
        for spec in specs
        if spec.is_lexical
    }
    return summarize(results, tasks, not_applicable)


def check_pairs(pairs: Sequence[str], labels: Sequence[str]) -> None:
    """Before any work: each `MODEL:BASELINE` names two of the evaluated models' labels (BASELINE may be `best`)."""
    for pair in pairs:
        model, _, baseline = pair.partition(":")
        for label in (model, baseline):
            if (label not in labels and label != "best") or model in (baseline, "best"):
                raise InputError(
                    f"--compare {pair}: {label!r} is not another evaluated model; expected MODEL:BASELINE "
                    f"(BASELINE may be 'best') of: {', '.join(labels)}",
                    param="--compare",
                )


def comparison_pairs(pairs: Sequence[str], summary: Summary) -> list[tuple[str, str]]:
    """(model, baseline) labels from `MODEL:BASELINE` entries, BASELINE `best` standing for the other model
    with the best overall average (e.g. bm25 against the best embedder); none given: every model against
    the first."""
    labels = summary.models
    if not pairs:
        return [(label, labels[0]) for label in labels[1:]]
    check_pairs(pairs, labels)
    resolved = []
    for pair in pairs:
        model, _, baseline = pair.partition(":")
        if baseline == "best":
            scored = {m: s for m in labels if m != model and (s := summary.overall(m).score) is not None}
            if not scored:
                continue  # nothing scored to compare with
            baseline = max(scored, key=scored.__getitem__)
        resolved.append((model, baseline))
    return list(dict.fromkeys(resolved))


def compare_cached(
    specs: Sequence[ModelSpec],
    summary: Summary,
    cache: ResultCache,
    pairs: Sequence[str] = (),
    n_resamples: int = N_RESAMPLES,
) -> list[Difference]:
    """Paired differences of the `pairs` (`comparison_pairs`), per summary row and for the average."""
    if len(specs) < 2:
        return []
    by_label = {spec.label: spec for spec in specs}
    inputs: dict[str, dict[str, RowInput]] = {}  # label -> row_inputs, each model's predictions read once

    def inputs_of(label: str) -> dict[str, RowInput]:
        if label not in inputs:
            inputs[label] = row_inputs(by_label[label], summary, cache)
        return inputs[label]

    differences = []
    for model, baseline in comparison_pairs(pairs, summary):
        ours, theirs = inputs_of(model), inputs_of(baseline)
        rows = {name: (ours[name], theirs[name]) for name in ours}
        differences += compare_pair(model, baseline, rows, n_resamples)
    return differences


def row_inputs(spec: ModelSpec, summary: Summary, cache: ResultCache) -> dict[str, RowInput]:
    """What the significance test needs of `spec` per summary row: its main score, and its per-example scores
    from the saved predictions (None where a part has none)."""
    by_row = {}
    for row in summary.rows:
        parts = [example_scores(t, predictions_file(cache, spec, t)) for t in row.parts]
        complete = [p for p in parts if p is not None]
        by_row[row.name] = RowInput(
            summary.scores[spec.label].get(row.name), complete if len(complete) == len(parts) else None
        )
    return by_row


def saved_row_inputs(
    specs: Sequence[ModelSpec], summary: Summary, out_dir: Path
) -> dict[str, dict[str, RowInput]]:
    """`row_inputs` of each model (by label) from an evaluation's output directory."""
    cache = ResultCache(out_dir)
    return {spec.label: row_inputs(spec, summary, cache) for spec in specs}


def predictions_file(cache: ResultCache, spec: ModelSpec, task: AbsTask) -> Path:
    return predictions_dir(cache, spec, task.metadata.name) / task.prediction_file_name


def _write_settings(
    specs: Sequence[ModelSpec], tasks: Sequence[AbsTask], settings: EvalSettings, out_dir: Path
) -> Path:
    """settings.json: the uniform protocol, each model's identity, the tasks, the significance test and library
    versions."""
    from importlib.metadata import version

    record = {
        "settings": settings.model_dump(),
        "models": [
            {
                "label": s.label,
                "kind": s.kind,
                "source": s.source,
                "mteb_name": s.meta.name,
                "revision": s.meta.revision,
                "experiment": s.meta.experiment_name,
            }
            for s in specs
        ],
        "tasks": [t.metadata.name for t in tasks],
        "significance": {
            "test": "paired bootstrap",
            "resamples": N_RESAMPLES,
            "confidence": CONFIDENCE,
            "seed": SEED,
        },
        "versions": {p: version(p) for p in ("mteb", "sentence-transformers", "transformers", "torch")},
    }
    path = out_dir / "settings.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path
