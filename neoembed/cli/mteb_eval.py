"""`neoembed mteb-eval`: evaluate embedders (and bm25) on MTEB under one uniform protocol."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from neoembed.cli.options import Flag, options_from
from neoembed.errors import InputError
from neoembed.evaluation import EvalSettings, MtebEvalSettings

console = Console()


def _read_prompts(prompts_file: Path | None, prompt: tuple[str, ...]) -> dict[str, str]:
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
    for item in prompt:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise InputError(f"--prompt: expected KEY=TEXT, got {item!r}", param="--prompt")
        prompts[key] = text
    return prompts


def _validate_prompt_keys(prompts: dict[str, str], tasks) -> None:
    from neoembed.evaluation import task_types

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
    from neoembed.evaluation import to_markdown

    console.print(to_markdown(report.summary), markup=False, soft_wrap=True)
    counts = {s: sum(o.status == s for o in report.outcomes) for s in ("done", "cached", "failed", "n/a")}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()) + f"; files in {out_dir}", markup=False)
    for outcome in report.failed:
        console.print(f"FAILED {outcome.model} / {outcome.task}: {outcome.error}", markup=False, style="red")
    for hint in dict.fromkeys(o.hint for o in report.failed if o.hint):
        console.print(f"hint: {hint}", markup=False)


@options_from(
    MtebEvalSettings,
    flags=[
        Flag("models", ("--model", "-m")),
        Flag("tasks", ("--tasks", "-t")),
        Flag("benchmark", ("--benchmark", "-b")),
        Flag("output", ("--output", "-o")),
        Flag("prompts_file", ("--prompts",)),
    ],
    exclude=("protocol.prompts",),
)
def mteb_eval(settings: MtebEvalSettings) -> None:
    """Evaluate models on MTEB tasks under one protocol; cached per model and task, resumable. With no -m, what
    `neoembed contrastive` exported here beside its base and bm25; with no tasks, the offline neoembed-local."""
    from neoembed.evaluation import resolve_models, run_evaluation, select_tasks, use_local_datasets
    from neoembed.workflow import announce, eval_choices

    settings, choices = eval_choices(settings)
    console.print(announce(choices), markup=False, soft_wrap=True)
    if settings.threads:
        import torch

        torch.set_num_threads(settings.threads)
    selected = select_tasks(settings.tasks, settings.benchmark, settings.task_types, settings.columns)
    datasets_dir, output = settings.datasets_dir, settings.output
    if datasets_dir is not None:
        if not datasets_dir.is_dir():
            raise InputError(f"--datasets-dir: {datasets_dir} is not a directory", param="--datasets-dir")
        local = use_local_datasets(selected, datasets_dir)
        console.print(f"local dataset copies for: {', '.join(local) or 'no selected task'}", markup=False)
    prompts = _read_prompts(settings.prompts_file, settings.prompt)
    _validate_prompt_keys(prompts, selected)
    protocol = EvalSettings.model_validate({**settings.protocol.model_dump(), "prompts": prompts})
    specs = resolve_models(settings.models, protocol)
    console.print(
        f"{len(specs)} model(s) x {len(selected)} task(s); settings: {json.dumps(protocol.model_dump())}",
        markup=False,
    )
    report = run_evaluation(
        specs,
        selected,
        protocol,
        output,
        device=settings.device,
        compile=settings.compile,
        pairs=settings.compare,
    )
    _print_summary(report, output)
    if report.failed:
        raise typer.Exit(code=1)
