"""`neoembed quickstart`: the README's main job on the embedded default."""

from __future__ import annotations

import typer

from neoembed.cli.options import options_from
from neoembed.quickstart import QuickstartSettings


@options_from(QuickstartSettings)
def quickstart(settings: QuickstartSettings) -> None:
    """Data, pretraining, fine-tuning, evaluation, indexing and loading, end to end on WordNet; a re-run
    resumes from the finished steps."""
    import neoembed.quickstart

    summary = neoembed.quickstart.run_quickstart(settings.run_dir, settings.sizes)
    typer.echo(f"summary: {summary}")
