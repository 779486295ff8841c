"""`neoembed pretrain --recipe R [--section.field value ...]`: MLM pretraining of NeoBERT."""

from __future__ import annotations

import typer

from neoembed.cli.options import recipe_options
from neoembed.pretrain import PretrainSettings


@recipe_options(PretrainSettings)
def pretrain(settings: PretrainSettings) -> None:
    """Pretrain NeoBERT with masked language modelling; extra `--section.field value` pairs override the
    recipe (e.g. --train.max_steps 50 --data.mode padded). Re-running resumes from the newest checkpoint."""
    from neoembed.pretrain import run_pretraining
    from neoembed.training import release_process_group

    final = run_pretraining(settings)
    release_process_group()
    typer.echo(f"final model: {final}")
