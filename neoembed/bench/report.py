"""Benchmark output: every benchmark writes the same JSON + markdown pair."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import torch


def machine_description() -> dict:
    """What the figures were measured on, recorded beside them."""
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


def write_report(out_dir: Path, name: str, payload: dict, markdown: str) -> tuple[Path, Path]:
    """Write `<name>.json` (payload plus machine description) and `<name>.md` under `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps({"machine": machine_description(), **payload}, indent=2) + "\n")
    md_path.write_text(markdown + "\n")
    return json_path, md_path
