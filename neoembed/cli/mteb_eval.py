"""`neoembed mteb-eval`: evaluate embedders (and bm25) on MTEB under one uniform protocol."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console()


def _split(values: list[str] | None) -> list[str]:
    return [v.strip() for value in values or [] for v in value.split(",") if v.strip()]


def _read_prompts(prompts_file: Path | None, prompt: list[str] | None) -> dict[str, str]:
    """Prompts from a JSON/YAML mapping file, then `KEY=TEXT` flags (which win)."""
    prompts: dict[str, str] = {}
    if prompts_file is not None:
        import yaml

        try:
            loaded = yaml.safe_load(prompts_file.read_text(encoding="utf-8"))  # YAML is a superset of JSON
        except (OSError, yaml.YAMLError) as err:
            raise typer.BadParameter(f"cannot read {prompts_file}: {err}", param_hint="--prompts") from err
        if not isinstance(loaded, dict) or not all(isinstance(v, str) for v in loaded.values()):
            raise typer.BadParameter(
                f"{prompts_file} must map prompt keys (task name, task type, query, document, "
                "'<task or type>-query') to prompt strings",
                param_hint="--prompts",
            )
        prompts.update({str(k): v for k, v in loaded.items()})
    for item in prompt or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=TEXT, got {item!r}", param_hint="--prompt")
        prompts[key] = text
    return prompts


def _validate_prompt_keys(prompts: dict[str, str], tasks) -> None:
    from neoembed.evaluation.tasks import task_types

    names = {t.metadata.name for t in tasks} | set(task_types()) | {"query", "document"}
    for key in prompts:
        base = key.rsplit("-", 1)[0] if key.endswith(("-query", "-document")) else key
        if base not in names:
            raise typer.BadParameter(
                f"prompt key {key!r} is not a selected task name, a task type, 'query' or 'document' "
                "(optionally suffixed with -query / -document)",
                param_hint="--prompt",
            )


def _print_summary(report, out_dir: Path) -> None:
    from neoembed.evaluation.summary import to_markdown

    console.print(to_markdown(report.summary), markup=False, soft_wrap=True)
    counts = {s: sum(o.status == s for o in report.outcomes) for s in ("done", "cached", "failed", "n/a")}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()) + f"; files in {out_dir}", markup=False)
    for outcome in report.failed:
        console.print(f"FAILED {outcome.model} / {outcome.task}: {outcome.error}", markup=False, style="red")
    for hint in dict.fromkeys(o.hint for o in report.failed if o.hint):
        console.print(f"hint: {hint}", markup=False)


def mteb_eval(
    model: Annotated[
        list[str],
        typer.Option(
            "--model",
            "-m",
            help="Repeatable. A sentence-transformers dir or hub id, 'minilm', a transformers encoder dir "
            "or hub id (pooled per --pooling), or 'bm25'.",
        ),
    ],
    tasks: Annotated[
        list[str] | None,
        typer.Option("--tasks", "-t", help="Comma-separated task names (local WordNet tasks or mteb tasks)."),
    ] = None,
    benchmark: Annotated[
        str | None,
        typer.Option(
            "--benchmark",
            "-b",
            help="An mteb benchmark: 'MTEB(eng, v2)' (current English leaderboard), 'MTEB(eng, v1)' (the "
            "NeoBERT paper's), ... or 'neoembed-local'.",
        ),
    ] = None,
    task_types: Annotated[
        list[str] | None,
        typer.Option(
            "--task-types",
            help="Comma-separated types (Retrieval,STS,...): filters the selection (alone: MTEB(eng, v2)).",
        ),
    ] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="Results cache and summaries.")] = Path(
        "runs/mteb"
    ),
    max_length: Annotated[
        int, typer.Option(help="Max tokens per text (capped at the model's positions).")
    ] = 512,
    batch_size: Annotated[int, typer.Option(help="Encoding batch size.")] = 32,
    pooling: Annotated[
        str, typer.Option(help="Pooling for every embedder: mean (paper), cls, max, lasttoken.")
    ] = ("mean"),
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or float16.")] = "float32",
    normalize: Annotated[
        bool, typer.Option("--normalize/--no-normalize", help="L2-normalise embeddings.")
    ] = True,
    prompts_file: Annotated[
        Path | None, typer.Option("--prompts", help="JSON/YAML file: prompt key -> prompt text.")
    ] = None,
    prompt: Annotated[
        list[str] | None, typer.Option("--prompt", help="Repeatable KEY=TEXT prompt (none by default).")
    ] = None,
    datasets_dir: Annotated[
        Path | None,
        typer.Option(help="Local copies of mteb datasets as DIR/<org>/<name> (e.g. DIR/mteb/sts12-sts)."),
    ] = None,
    device: Annotated[
        str | None, typer.Option(help="Torch device (default: sentence-transformers' choice).")
    ] = None,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's).")] = None,
) -> None:
    """Evaluate models on MTEB tasks under one protocol; cached per model and task, resumable."""
    from neoembed.evaluation.models import EvalSettings, ModelLoadError
    from neoembed.evaluation.runner import resolve_models, run_evaluation
    from neoembed.evaluation.tasks import TaskSelectionError, select_tasks, use_local_datasets

    if threads:
        import torch

        torch.set_num_threads(threads)
    try:
        selected = select_tasks(_split(tasks), benchmark, _split(task_types))
    except TaskSelectionError as err:
        raise typer.BadParameter(str(err), param_hint="--tasks/--benchmark/--task-types") from err
    if datasets_dir is not None:
        if not datasets_dir.is_dir():
            raise typer.BadParameter(f"{datasets_dir} is not a directory", param_hint="--datasets-dir")
        local = use_local_datasets(selected, datasets_dir)
        console.print(f"local dataset copies for: {', '.join(local) or 'no selected task'}", markup=False)
    prompts = _read_prompts(prompts_file, prompt)
    _validate_prompt_keys(prompts, selected)
    try:
        settings = EvalSettings(max_length, batch_size, pooling, dtype, normalize, prompts)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from err
    try:
        specs = resolve_models(model, settings)
    except ModelLoadError as err:
        raise typer.BadParameter(str(err), param_hint="--model") from err
    console.print(
        f"{len(specs)} model(s) x {len(selected)} task(s); settings: {json.dumps(settings.to_dict())}",
        markup=False,
    )
    report = run_evaluation(specs, selected, settings, output, device=device)
    _print_summary(report, output)
    if report.failed:
        raise typer.Exit(code=1)
