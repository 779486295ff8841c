"""`neoembed contrastive --recipe R [--steps N] [--section.field value ...]`: InfoNCE fine-tuning + export."""

from __future__ import annotations

import typer

from neoembed.cli.options import Flag, recipe_options
from neoembed.contrastive import ContrastiveSettings


@recipe_options(ContrastiveSettings, shortcuts=[Flag("train.max_steps", ("--steps",))])
def contrastive(settings: ContrastiveSettings) -> None:
    """Fine-tune an encoder into a sentence embedder with InfoNCE and export it as a sentence-transformers
    directory; extra `--section.field value` pairs override the recipe (e.g. --train.batch_size 64
    --model.base path/to/neobert). Re-running resumes from the newest complete checkpoint."""
    from neoembed.contrastive import run_contrastive
    from neoembed.training import release_process_group

    result = run_contrastive(settings)
    release_process_group()
    typer.echo(f"steps: {result.steps}")
    for line in result.score_lines():
        typer.echo(line)
    if result.export:
        typer.echo(f"exported: {result.export}")
