"""A tiny resumable step runner: each finished step leaves a marker, and a re-run skips it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console


@dataclass
class Step:
    name: str
    description: str
    run: Callable[[Path], dict]  # takes the run directory, returns a small JSON-able result


class StepFailed(RuntimeError):
    """A step raised; the message names the step, and finished steps stay finished."""


def run_steps(steps: list[Step], run_dir: Path, console: Console | None = None) -> dict[str, dict]:
    """Run `steps` in order under `run_dir`, skipping those already done; return each step's result."""
    console = console or Console()
    markers = run_dir / "steps"
    markers.mkdir(parents=True, exist_ok=True)
    results = {}
    for number, step in enumerate(steps, start=1):
        marker = markers / f"{step.name}.json"
        title = f"[bold]step {number}/{len(steps)}: {step.name}[/bold] - {step.description}"
        if marker.exists():
            console.print(f"{title} [green](done earlier, skipped)[/green]")
            results[step.name] = json.loads(marker.read_text())["result"]
            continue
        console.print(title)
        start = time.perf_counter()
        try:
            result = step.run(run_dir)
        except Exception as err:
            raise StepFailed(f"step {step.name!r} failed: {err}") from err
        seconds = time.perf_counter() - start
        marker.write_text(json.dumps({"seconds": round(seconds, 2), "result": result}, indent=2))
        console.print(f"  done in {seconds:.1f}s")
        results[step.name] = result
    return results
