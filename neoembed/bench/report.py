"""Benchmark output: a bench measures into `Row`s and declares a `Report` (its tables, the checks against its
targets, the figures the JSON keeps), and `write_report` renders every report the same way, as `<name>.json`
and `<name>.md`. Timing helpers every bench shares live here too."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import platform
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from neoembed.run_files import write_text

Cell = str | int | float | None  # a figure is a number, or text where it is a choice or a formatted spread


@dataclass(frozen=True)
class Row:
    """One line of a bench table and one object of its JSON `rows`: `label` says what was measured (model,
    case, layout), `figures` what was measured, by name; `unit` the figures' unit where their names do not
    say it; `note` what a reader must know (why a row has no figures, an MFU that is a measurement error)."""

    label: Mapping[str, str | int]
    figures: Mapping[str, Cell] = field(default_factory=dict)
    unit: str | None = None
    note: str | None = None

    def cells(self) -> dict[str, Cell]:
        """Label, figures, then unit and note where given: the JSON object and the table's cells."""
        ending = {name: value for name, value in (("unit", self.unit), ("note", self.note)) if value}
        return {**self.label, **self.figures, **ending}

    def __getitem__(self, name: str) -> Cell:
        return self.cells()[name]

    def get(self, name: str, default: Cell = None) -> Cell:
        return self.cells().get(name, default)

    def number(self, name: str) -> float:
        """The figure `name` where arithmetic needs it as a number; a TypeError where it is text or None."""
        value = self[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"row {self.label}: {name} is {value!r}, not a number")
        return value

    def text(self, name: str) -> str:
        """The cell `name` where it must be text; a TypeError where it is a number or None."""
        value = self[name]
        if not isinstance(value, str):
            raise TypeError(f"row {self.label}: {name} is {value!r}, not text")
        return value

    def adding(self, figures: Mapping[str, Cell]) -> Row:
        """This row with more figures after its own."""
        return dataclasses.replace(self, figures={**self.figures, **figures})


@dataclass
class Table:
    """Rows of one measurement, shown as a markdown table under an optional heading."""

    rows: list[Row]
    columns: list[str] | None = None  # None: every cell of the rows, in the order first seen
    heading: str | None = None
    after: list[str] = field(default_factory=list)  # paragraphs after it

    def shown_columns(self) -> list[str]:
        return self.columns or list(dict.fromkeys(column for row in self.rows for column in row.cells()))


@dataclass
class Report:
    """What one bench run measured."""

    name: str  # the files' stem: <out>/<name>.json and <name>.md
    title: str
    payload: dict[str, object]  # every figure the JSON keeps (rows, settings, ratios), by its JSON key
    tables: list[Table] = field(default_factory=list)
    intro: list[str] = field(default_factory=list)  # paragraphs under the title (settings, peaks)
    verdicts: list[str] = field(default_factory=list)  # each target check, met or missed, as a sentence


@dataclass(frozen=True)
class WrittenReport:
    markdown: str
    json_path: Path
    markdown_path: Path


def meets(met: bool) -> str:  # how a verdict says whether a figure meets its target
    return "meets" if met else "MISSES"


def met_text(met: bool) -> str:  # how a target check ends
    return "met" if met else "NOT met"


def rotated(items: Sequence, turn: int) -> list:
    """`items` starting at position `turn` (modulo their number): passes over several variants interleaved in
    rotating order, so that machine noise affects them all alike."""
    shift = turn % len(items)
    return [*items[shift:], *items[:shift]]


def timed(call: Callable[[], object]) -> float:  # wall seconds
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def percentile_ms(latencies: Sequence[float], q: float) -> float:
    """The `q`th percentile of latencies in seconds, in milliseconds."""
    import numpy as np  # here: the CLI imports this module's types at start-up

    return float(np.percentile(latencies, q)) * 1000


def _run_child(target: Callable[..., dict[str, Any]], args: tuple, result_path: str) -> None:
    """Child process: `target(*args)`'s figures and the child's peak RSS (ru_maxrss: KiB on Linux), as JSON."""
    figures = target(*args)  # first: the peak is the child's after it
    figures["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    Path(result_path).write_text(json.dumps(figures, default=int))


def in_child(target: Callable[..., dict[str, Any]], *args, work: Path) -> dict[str, Any]:
    """`target(*args)` run in a fresh process, which measures its own peak RSS, and what it returned: a
    measurement that no other in this process's memory (or allocator caches) can touch."""
    result_path = work / f"{target.__name__}.json"
    child = multiprocessing.get_context("spawn").Process(
        target=_run_child, args=(target, args, str(result_path))
    )
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"the benchmark child process failed with exit code {child.exitcode}")
    return json.loads(result_path.read_text())


def machine_description() -> dict[str, str | int | None]:
    """What the figures were measured on, recorded beside them."""
    import torch  # here, not at the top: `neoembed bench --help` imports this module's types without torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def markdown_table(rows: list[Row], columns: list[str]) -> str:
    """A GitHub markdown table of `rows` restricted to `columns`; floats with 3 significant decimals."""

    def cell(value: Cell) -> str:
        if isinstance(value, float):
            return f"{value:,.3g}" if abs(value) < 1 else f"{value:,.1f}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(report: Report) -> str:
    parts = [f"# {report.title}", *report.intro]
    for table in report.tables:
        if table.heading:
            parts.append(f"## {table.heading}")
        parts += [markdown_table(table.rows, table.shown_columns()), *table.after]
    if report.verdicts:
        parts.append("\n".join(f"- {verdict}" for verdict in report.verdicts))
    return "\n\n".join(parts)


def _json_value(value: object) -> object:
    """How the JSON writes what it cannot write itself: a row as its cells, a dataclass as its fields (one
    level: json recurses, and comes back here for rows inside), settings as their JSON dump, the rest as text."""
    if isinstance(value, Row):
        return value.cells()
    if dataclasses.is_dataclass(value):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)


def write_report(report: Report, out_dir: Path) -> WrittenReport:
    """Write `<name>.json` (the payload, the verdicts and the machine) and `<name>.md` under `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{report.name}.json", out_dir / f"{report.name}.md"
    data = {"machine": machine_description(), **report.payload}
    if report.verdicts:
        data["verdicts"] = report.verdicts
    write_text(json_path, json.dumps(data, indent=2, default=_json_value) + "\n")
    markdown = render_markdown(report)
    write_text(md_path, markdown + "\n")
    return WrittenReport(markdown, json_path, md_path)
