"""`neoembed pretrain [--recipe R] [--section.field value ...]`: MLM pretraining of NeoBERT."""

from __future__ import annotations

import typer

from neoembed.cli.options import recipe_options
from neoembed.pretrain import PretrainSettings
from neoembed.workflow import PRETRAIN_RECIPE, RecipeChoice, announce, pretrain_choices


@recipe_options(PretrainSettings, default_recipe=PRETRAIN_RECIPE)
def pretrain(settings: PretrainSettings, recipe: RecipeChoice) -> None:
    """Pretrain NeoBERT with masked language modelling (by default a small one on WordNet, in minutes on CPU);
    extra `--section.field value` pairs override the recipe (e.g. --train.max_steps 50 --data.mode padded).
    Re-running resumes from the newest checkpoint."""
    from neoembed.pretrain import run_pretraining
    from neoembed.training import release_process_group

    typer.echo(announce(pretrain_choices(settings, recipe)))
    final = run_pretraining(settings)
    release_process_group()
    typer.echo(f"final model: {final}")
