"""A small resumable step runner: each finished step leaves a marker, and a re-run skips it.

Steps run the toolkit's own commands (`neoembed build-data ...`) in child processes, so the pipeline shows
exactly what a user would type, each command's output streams to the terminal and to `logs/<step>.log`, and
a crash in one command cannot take the runner (or the finished steps' results) with it.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from rich.console import Console

from neoembed.errors import RunError
from neoembed.run_files import write_json

PROGRESS_BAR = re.compile(r"\d+%\|")  # tqdm's "42%|████" (rich bars print to a terminal only)


@dataclass
class Ran:
    """What running a step gave: its result (a dataclass of JSON-able fields) and the commands it ran."""

    result: Any
    commands: list[str]


@dataclass
class Step:
    name: str
    description: str
    run: Callable[[Path], Ran]  # takes the run directory
    result_type: type  # the dataclass of its result, to read a finished step's marker back


@dataclass
class Finished:
    """A finished step, as its marker records it."""

    seconds: float
    commands: list[str]
    result: Any  # the step's result_type


class StepFailed(RunError):
    """A step raised; the message names the step, and finished steps stay finished."""


class CommandFailed(RunError):
    """A command exited with a non-zero status; the message quotes its last line of output."""


def run_command(
    args: list,
    log: Path,
    console: Console,
    cwd: Path | None = None,
    program: str = "neoembed",
    echo: bool = True,
) -> str:
    """Run `neoembed ARGS` (or, with program="python", a Python script) in a child process; return its output.

    The child's output goes to `log` (appended, so a resumed command keeps the earlier attempt's lines) and,
    with `echo`, streams to the terminal. A non-zero exit raises CommandFailed with the last line printed."""
    shown = command_line(args, program)
    console.print(f"  [cyan]$ {shown}[/cyan]", highlight=False, soft_wrap=True)
    command = [sys.executable, *(["-m", "neoembed"] if program == "neoembed" else []), *map(str, args)]
    log.parent.mkdir(parents=True, exist_ok=True)
    output = bytearray()
    with log.open("ab") as log_file:
        log_file.write(f"\n$ {shown}\n".encode())
        child = subprocess.Popen(
            command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_child_env()
        )
        stdout = cast(io.BufferedReader, child.stdout)  # stdout=PIPE, buffered: read1 returns what is there
        while chunk := stdout.read1(65536):
            if echo:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            log_file.write(chunk)
            output += chunk
        status = child.wait()
    text = output.decode(errors="replace")
    if status != 0:
        raise CommandFailed(f"`{shown}` exited with status {status}: {_last_line(text)} (full output: {log})")
    return text


def command_line(args: list, program: str = "neoembed") -> str:
    """The command as a user would type it, with paths under the current directory made relative."""

    def shown(arg) -> str:
        if isinstance(arg, Path) and arg.is_absolute() and arg.is_relative_to(Path.cwd()):
            arg = arg.relative_to(Path.cwd())
        return shlex.quote(str(arg))

    return " ".join([program, *map(shown, args)])


def _child_env() -> dict[str, str]:
    # Library warnings about forked tokenizers are noise here: each command is its own process.
    return {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


def printed_lines(text: str) -> list[str]:
    """A command's output as a user would read it: no colour codes, no progress bars, no blank lines."""
    parts = [
        re.sub(r"\x1b\[[0-9;]*m", "", part).rstrip()
        for line in text.splitlines()
        for part in line.split("\r")
    ]
    return [line for line in parts if line.strip() and not PROGRESS_BAR.search(line)]


def _last_line(text: str) -> str:
    """The last line that is not a progress bar: the error a failing command printed last."""
    lines = printed_lines(text)
    return lines[-1].strip() if lines else "no output"


def run_steps(steps: list[Step], run_dir: Path, console: Console | None = None) -> dict[str, Finished]:
    """Run `steps` in order under `run_dir`, skipping those already done; return each step's result, commands
    and time."""
    console = console or Console(soft_wrap=True)  # long commands and titles stay on one line
    markers = run_dir / "steps"
    markers.mkdir(parents=True, exist_ok=True)
    results = {}
    for number, step in enumerate(steps, start=1):
        marker = markers / f"{step.name}.json"
        title = f"[bold]step {number}/{len(steps)}: {step.name}[/bold] - {step.description}"
        if (finished := read_marker(marker, step.result_type)) is not None:
            console.print(f"{title} [green](done earlier, skipped)[/green]")
            results[step.name] = finished
            continue
        console.print(title)
        start = time.perf_counter()
        try:
            ran = step.run(run_dir)
        except Exception as err:
            raise StepFailed(
                f"step {number} ({step.name}) failed: {err}. Fix the cause and re-run: finished steps are kept"
            ) from err
        seconds = time.perf_counter() - start
        results[step.name] = Finished(round(seconds, 1), ran.commands, ran.result)
        write_json(marker, asdict(results[step.name]))
        console.print(f"  [green]done in {seconds:.0f} s[/green]")
    return results


def read_marker(marker: Path, result_type: type) -> Finished | None:
    """The finished step `marker` records, or None when there is none or it is not this version's form (the
    step then runs again; its command resumes from what it left)."""
    try:
        record = json.loads(marker.read_text())
        return Finished(record["seconds"], record["commands"], result_type(**record["result"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
