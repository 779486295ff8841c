"""`neoembed bench ...`: throughput and quality benchmarks.

Each command times its variants inside one run on this machine, prints ratios, and writes JSON plus a
markdown table under its output directory.
"""

import typer

app = typer.Typer(
    help="Benchmarks: each writes JSON and a markdown table and prints ratios measured in one run.",
    no_args_is_help=True,
)
