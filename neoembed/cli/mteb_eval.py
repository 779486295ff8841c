"""`neoembed mteb-eval`: evaluate embedders (and bm25) on MTEB under one uniform protocol."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from neoembed.cli.options import options_from
from neoembed.errors import InputError
from neoembed.evaluation.models import EvalSettings

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
            raise InputError(f"--prompts: cannot read {prompts_file}: {err}", param="--prompts") from err
        if not isinstance(loaded, dict) or not all(isinstance(v, str) for v in loaded.values()):
            raise InputError(
                f"--prompts: {prompts_file} must map prompt keys (task name, task type, query, document, "
                "'<task or type>-query') to prompt strings",
                param="--prompts",
            )
        prompts.update({str(k): v for k, v in loaded.items()})
    for item in prompt or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise InputError(f"--prompt: expected KEY=TEXT, got {item!r}", param="--prompt")
        prompts[key] = text
    return prompts


def _validate_prompt_keys(prompts: dict[str, str], tasks) -> None:
    from neoembed.evaluation.tasks import task_types

    names = {t.metadata.name for t in tasks} | set(task_types()) | {"query", "document"}
    for key in prompts:
        base = key.rsplit("-", 1)[0] if key.endswith(("-query", "-document")) else key
        if base not in names:
            raise InputError(
                f"--prompt: key {key!r} is not a selected task name, a task type, 'query' or 'document' "
                "(optionally suffixed with -query / -document)",
                param="--prompt",
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


@options_from(EvalSettings, exclude=("prompts",))
def mteb_eval(
    settings: EvalSettings,
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
    from neoembed.evaluation.runner import resolve_models, run_evaluation
    from neoembed.evaluation.tasks import select_tasks, use_local_datasets

    if threads:
        import torch

        torch.set_num_threads(threads)
    selected = select_tasks(_split(tasks), benchmark, _split(task_types))
    if datasets_dir is not None:
        if not datasets_dir.is_dir():
            raise InputError(f"--datasets-dir: {datasets_dir} is not a directory", param="--datasets-dir")
        local = use_local_datasets(selected, datasets_dir)
        console.print(f"local dataset copies for: {', '.join(local) or 'no selected task'}", markup=False)
    prompts = _read_prompts(prompts_file, prompt)
    _validate_prompt_keys(prompts, selected)
    settings = EvalSettings.model_validate({**settings.model_dump(), "prompts": prompts})
    specs = resolve_models(model, settings)
    console.print(
        f"{len(specs)} model(s) x {len(selected)} task(s); settings: {json.dumps(settings.model_dump())}",
        markup=False,
    )
    report = run_evaluation(specs, selected, settings, output, device=device)
    _print_summary(report, output)
    if report.failed:
        raise typer.Exit(code=1)
