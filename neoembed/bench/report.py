"""Benchmark output: a bench measures into a `Report` (its rows, the checks against its targets, the figures
the JSON keeps), and `write_report` renders every report the same way, as `<name>.json` and `<name>.md`."""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from pathlib import Path

from neoembed.run_files import write_text


@dataclass
class Table:
    """Rows of one measurement, shown as a markdown table under an optional heading."""

    rows: list[dict]
    columns: list[str] | None = None  # None: every column of the rows, in the order first seen
    heading: str | None = None
    before: list[str] = field(default_factory=list)  # paragraphs between the heading and the table
    after: list[str] = field(default_factory=list)  # paragraphs after it

    def shown_columns(self) -> list[str]:
        return self.columns or list(dict.fromkeys(column for row in self.rows for column in row))


@dataclass
class Report:
    """What one bench run measured."""

    name: str  # the files' stem: <out>/<name>.json and <name>.md
    title: str
    payload: dict  # every figure the JSON keeps (rows, settings, ratios)
    tables: list[Table] = field(default_factory=list)
    intro: list[str] = field(default_factory=list)  # paragraphs under the title (settings, peaks)
    verdicts: list[str] = field(default_factory=list)  # each target check, met or missed, as a sentence
    summary: str | None = None  # a closing paragraph


@dataclass(frozen=True)
class WrittenReport:
    report: Report
    markdown: str
    json_path: Path
    markdown_path: Path


def machine_description() -> dict:
    """What the figures were measured on, recorded beside them."""
    import torch  # here, not at the top: `neoembed bench --help` imports this module's types without torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    """A GitHub markdown table of `rows` restricted to `columns`; floats with 3 significant decimals."""

    def cell(value) -> str:
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
        parts += [*table.before, markdown_table(table.rows, table.shown_columns()), *table.after]
    if report.verdicts:
        parts.append("\n".join(f"- {verdict}" for verdict in report.verdicts))
    if report.summary:
        parts.append(report.summary)
    return "\n\n".join(parts)


def write_report(report: Report, out_dir: Path) -> WrittenReport:
    """Write `<name>.json` (the payload, the verdicts and the machine) and `<name>.md` under `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{report.name}.json", out_dir / f"{report.name}.md"
    data = {"machine": machine_description(), **report.payload}
    if report.verdicts:
        data["verdicts"] = report.verdicts
    write_text(json_path, json.dumps(data, indent=2, default=str) + "\n")
    markdown = render_markdown(report)
    write_text(md_path, markdown + "\n")
    return WrittenReport(report, markdown, json_path, md_path)
