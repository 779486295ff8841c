"""`neoembed contrastive [--recipe R] [--steps N] [--section.field value ...]`: InfoNCE fine-tuning + export."""

from __future__ import annotations

import typer

from neoembed.cli.options import Flag, recipe_options
from neoembed.contrastive import ContrastiveSettings
from neoembed.workflow import RecipeChoice, announce, contrastive_choices, default_contrastive_recipe


@recipe_options(
    ContrastiveSettings,
    default_recipe=default_contrastive_recipe,
    shortcuts=[Flag.of(ContrastiveSettings, lambda s: s.train.max_steps, "--steps")],
)
def contrastive(settings: ContrastiveSettings, recipe: RecipeChoice) -> None:
    """Fine-tune an encoder into a sentence embedder with InfoNCE and export it as a sentence-transformers
    directory; by default the NeoBERT `neoembed pretrain` left here, else the packaged MiniLM, on the data
    its recipe builds where it is missing. Extra `--section.field value` pairs override the recipe (e.g.
    --train.batch_size 64 --model.base path/to/neobert). Re-running resumes from the newest complete
    checkpoint."""
    from neoembed.contrastive import run_contrastive
    from neoembed.training import release_process_group
    from neoembed.workflow import ensure_data

    typer.echo(announce(contrastive_choices(settings, recipe)))
    settings = ensure_data(settings, typer.echo)
    result = run_contrastive(settings)
    release_process_group()
    typer.echo(f"steps: {result.steps}")
    for line in result.score_lines():
        typer.echo(line)
    if result.export:
        typer.echo(f"exported: {result.export}")
