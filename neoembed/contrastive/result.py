"""What a contrastive run returns and records as summary.json: steps, held-out scores before and after, the
export."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from neoembed.run_files import write_json

SetScores = dict[str, dict[str, float]]  # held-out set -> metric (ndcg@10, recall@k, ...) -> value


def relative_change(before: float | None, after: float | None) -> float | None:
    """(after - before) / before; None where either score is missing or the base scored 0."""
    return None if not before or after is None else (after - before) / before


@dataclass
class ContrastiveResult:
    steps: int
    eval_before: SetScores | None  # None: nothing scored before training (no held-out sets)
    eval_after: SetScores
    export: str | None = None  # the exported directory (None on ranks other than the first)
    base_weight: float = 0.0  # the base model's share of the exported weights (export.base_weight, or auto's)
    selection: list[dict] | None = (
        None  # export.base_weight auto: each candidate's scores on the selection split
    )
    # the training step whose weights were exported (export.checkpoints all may choose an earlier checkpoint)
    exported_step: int | None = None

    def write(self, path: Path) -> None:
        write_json(path, asdict(self))

    @classmethod
    def read(cls, path: Path) -> ContrastiveResult:
        return cls(**json.loads(Path(path).read_text()))

    def score_lines(self) -> list[str]:
        """`held-out SET: metric before -> after (change), ...`, one line per held-out set."""
        lines = []
        before = self.eval_before or {}
        for name, after in self.eval_after.items():
            scores = []
            for metric, value in after.items():
                was = before.get(name, {}).get(metric)
                change = relative_change(was, value)
                scores.append(
                    f"{metric} {value:.4f}"
                    if change is None
                    else f"{metric} {was:.4f} -> {value:.4f} ({change:+.1%})"
                )
            lines.append(f"held-out {name}: " + ", ".join(scores))
        return lines
