"""`neoembed quickstart`: the README's main job on the embedded default."""

from pathlib import Path

import typer


def quickstart(
    run_dir: Path = typer.Option(Path("runs/quickstart"), help="Where every step writes its outputs."),
    smoke: bool = typer.Option(False, help="Toy sizes: the same steps in a couple of minutes, as a check."),
):
    """Data, pretraining, fine-tuning, evaluation, indexing and loading, end to end on WordNet; a re-run
    resumes from the finished steps."""
    from neoembed.quickstart import DEFAULT, SMOKE, run_quickstart

    summary = run_quickstart(run_dir, SMOKE if smoke else DEFAULT)
    typer.echo(f"summary: {summary}")
