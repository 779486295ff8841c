"""`neoembed quickstart`: the README's main job on the embedded default."""

from pathlib import Path

import typer


def quickstart(
    run_dir: Path = typer.Option(Path("runs/quickstart"), help="Where every step writes its outputs."),
):
    """Run the toolkit end to end on the embedded default; a re-run resumes from finished steps."""
    from neoembed.quickstart import run_quickstart
    from neoembed.quickstart.steps import StepFailed

    try:
        summary = run_quickstart(run_dir)
    except StepFailed as err:
        typer.echo(f"quickstart stopped: {err}. Fix the cause and re-run: finished steps are kept.", err=True)
        raise typer.Exit(1) from err
    typer.echo(f"summary: {summary}")
