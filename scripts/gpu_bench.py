"""The GPU run behind docs/benchmarks/gpu.md: maintainer tooling for this repository, not part of the package.
From the repository root:

    python scripts/gpu_bench.py run [--dry-run] [--stages fast-by-default] [--out runs/bench/gpu]
    python scripts/gpu_bench.py docs docs/benchmarks/gpu

`run` runs every stage of gpu_stages.py, each in its own process under a time limit and kept when it passed
before (gpu_runner.py); `--dry-run` runs the same stages at tiny sizes on the CPU. `docs` rewrites
docs/benchmarks/gpu.md from a run's folder (gpu_docs.py). scripts/gpu_run.sh sets up the GPU machine and
calls `run`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gpu_docs
import gpu_runner


def positive_seconds(text: str) -> float:
    seconds = float(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return seconds


def command_line() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scripts/gpu_bench.py", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="Every GPU figure in one run, stage by stage.")
    run.add_argument(
        "--out",
        type=Path,
        default=Path("runs/bench/gpu"),
        help="One folder for every stage's results (a stage that passed there before is kept).",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="The same stages at tiny sizes on the CPU (checks the runner where there is no GPU).",
    )
    run.add_argument(
        "--stages",
        type=lambda text: tuple(text.split(",")),
        default=(),
        help="Only these stages, comma-separated (names as in gpu.md), or a named set of them "
        "(fast-by-default); default: all.",
    )
    run.add_argument(
        "--stage-timeout-s",
        type=positive_seconds,
        default=540.0,
        help="Seconds a stage may run before its processes are killed.",
    )
    run.add_argument(
        "--budget-s",
        type=positive_seconds,
        default=3600.0,
        help="Seconds for the whole run; a stage is not started with less than 30 s of it left.",
    )
    run.add_argument(
        "--wordnet-build",
        type=Path,
        default=None,
        help="A `neoembed build-data` output for the contrastive stages (default: the "
        "wordnet-build stage's).",
    )
    docs = commands.add_parser("docs", help="Rewrite docs/benchmarks/gpu.md from a run's folder.")
    docs.add_argument("results", type=Path, help="The folder `run` wrote (e.g. docs/benchmarks/gpu).")
    docs.add_argument(
        "--page", type=Path, default=Path("docs/benchmarks/gpu.md"), help="The page to rewrite."
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = command_line().parse_args(argv)
    if args.command == "docs":
        gpu_docs.write_page(args.results, args.page)
        print(f"wrote {args.page}")
        return 0
    settings = gpu_runner.RunSettings(
        args.out, args.dry_run, args.stages, args.stage_timeout_s, args.budget_s, args.wordnet_build
    )
    written = gpu_runner.run(settings)
    print(written.markdown)
    print(f"wrote {written.json_path} and {written.markdown_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
