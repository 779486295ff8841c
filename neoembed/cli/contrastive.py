"""`neoembed contrastive --recipe R [--steps N] [--section.field value ...]`: InfoNCE fine-tuning + export."""

from pathlib import Path

import typer


def contrastive(
    ctx: typer.Context,
    recipe: Path = typer.Option(..., exists=True, dir_okay=False, help="A contrastive recipe (YAML)."),
    steps: int | None = typer.Option(None, min=1, help="Optimisation steps (overrides train.max_steps)."),
):
    """Fine-tune an encoder into a sentence embedder with InfoNCE and export it as a sentence-transformers
    directory; extra `--section.field value` pairs override the recipe (e.g. --train.batch_size 64
    --model.base path/to/neobert). Re-running resumes from the newest complete checkpoint."""
    from neoembed.contrastive.data import ContrastiveDataError
    from neoembed.contrastive.model import BaseModelError
    from neoembed.contrastive.sampler import SamplerError
    from neoembed.contrastive.settings import ContrastiveSettings
    from neoembed.contrastive.train import run_contrastive
    from neoembed.recipes import RecipeError, load_recipe, parse_overrides
    from neoembed.runs import TrainingDiverged, release_process_group

    try:
        overrides = parse_overrides(ctx.args)
        if steps is not None:
            overrides["train.max_steps"] = steps
        settings = load_recipe(recipe, ContrastiveSettings, overrides)
        summary = run_contrastive(settings)
        release_process_group()
    except (RecipeError, ContrastiveDataError, BaseModelError, SamplerError, TrainingDiverged) as err:
        typer.echo(f"contrastive: {err}", err=True)
        raise typer.Exit(1) from err
    typer.echo(f"steps: {summary['steps']}")
    for stage in ("eval_before", "eval_after"):
        if summary.get(stage):
            typer.echo(f"{stage}: " + ", ".join(f"{k} {v:.4f}" for k, v in summary[stage].items()))
    if summary.get("export"):
        typer.echo(f"exported: {summary['export']}")
