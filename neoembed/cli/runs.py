"""`neoembed runs compare A B ...`: training runs' curves drawn on one figure."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Training runs: compare their curves.", no_args_is_help=True)


@app.command()
def compare(
    runs: Annotated[
        list[Path], typer.Argument(help="Two or more run output directories (each with its metrics.jsonl).")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The PNG written.")] = Path("compare.png"),
) -> None:
    """Draw the runs' loss, learning rate, gradient norm and held-out metrics on one figure."""
    from neoembed.errors import InputError
    from neoembed.training import plot_runs, read_curves

    if len(runs) < 2:
        raise InputError("give at least two run directories to compare", param="RUNS")
    # full paths where two runs share a folder name; else each run is named by its folder
    names: list[str | None] = [
        str(run) if len({run.name for run in runs}) < len(runs) else None for run in runs
    ]
    curves = [read_curves(run, name) for run, name in zip(runs, names)]
    typer.echo(f"wrote {plot_runs(curves, output)}")
