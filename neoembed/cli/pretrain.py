"""`neoembed pretrain --recipe R [--section.field value ...]`: MLM pretraining of NeoBERT."""

from pathlib import Path

import typer


def pretrain(
    ctx: typer.Context,
    recipe: Path = typer.Option(..., exists=True, dir_okay=False, help="A pretraining recipe (YAML)."),
):
    """Pretrain NeoBERT with masked language modelling; extra `--section.field value` pairs override the
    recipe (e.g. --train.max_steps 50 --data.mode padded). Re-running resumes from the newest checkpoint."""
    from neoembed.pretrain.corpus import CorpusError
    from neoembed.pretrain.settings import PretrainSettings
    from neoembed.pretrain.trainer import run_pretraining
    from neoembed.recipes import RecipeError, load_recipe, parse_overrides
    from neoembed.runs import TrainingDiverged, release_process_group

    try:
        settings = load_recipe(recipe, PretrainSettings, parse_overrides(ctx.args))
        final = run_pretraining(settings)
        release_process_group()
    except (RecipeError, CorpusError, TrainingDiverged) as err:
        typer.echo(f"pretrain: {err}", err=True)
        raise typer.Exit(1) from err
    typer.echo(f"final model: {final}")
