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
    from neoembed.quickstart.steps import StepFailed

    try:
        summary = run_quickstart(run_dir, SMOKE if smoke else DEFAULT)
    except StepFailed as err:
        typer.echo(f"quickstart stopped: {err}. Fix the cause and re-run: finished steps are kept.", err=True)
        raise typer.Exit(1) from err
    typer.echo(f"summary: {summary}")
