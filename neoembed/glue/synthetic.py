"""Easy synthetic data in GLUE's file layout, for smoke tests and offline demos (it is not GLUE).

Each row's label is carried by a cue word in the last text column (a class's word; for STS-B a word per
score band: "bad" 0-1, "maybe" 2-3, "good" 4-5), surrounded by random filler words; a model that learns the cue beats the majority / constant
baseline. Run `python -m neoembed.glue.synthetic DIR [TASK ...]` to write DIR/<task>/*.tsv.
"""

from __future__ import annotations

import csv
import random
import sys
from pathlib import Path

from neoembed.glue.tasks import TASKS, GlueTask, get_task

_FILLER = [
    "the",
    "a",
    "man",
    "woman",
    "dog",
    "cat",
    "house",
    "city",
    "river",
    "book",
    "car",
    "tree",
    "day",
    "night",
    "old",
    "new",
    "small",
    "big",
    "red",
    "blue",
]
_CUES = ("good", "bad", "maybe")  # class i's cue word
_SCORE_CUES = {"bad": 0.0, "maybe": 2.0, "good": 4.0}  # STS-B cue word -> lowest score of its band


def _row(task: GlueTask, rng: random.Random) -> dict[str, str | float]:
    if task.is_regression:
        cue = rng.choice(list(_SCORE_CUES))
        label = round(_SCORE_CUES[cue] + rng.random(), 2)
    else:
        # Skewed classes (60% class 0), so the majority baseline is well above chance.
        label = 0 if rng.random() < 0.6 else rng.randrange(1, task.num_labels)
        cue = _CUES[label]
    texts = [" ".join(rng.choices(_FILLER, k=rng.randint(3, 7))) for _ in task.text_columns]
    words = texts[-1].split()
    words.insert(rng.randint(0, len(words)), cue)
    texts[-1] = " ".join(words)
    return {**dict(zip(task.text_columns, texts)), "label": label}


def write_synthetic(
    out_dir: Path, tasks: list[str] | None = None, n_train: int = 256, n_eval: int = 64, seed: int = 0
) -> list[Path]:
    """Write `<out_dir>/<task>/{train,<dev splits>}.tsv` for each task; returns the task directories."""
    rng = random.Random(seed)
    written = []
    for name in tasks or list(TASKS):
        task = get_task(name)
        task_dir = Path(out_dir) / task.name
        task_dir.mkdir(parents=True, exist_ok=True)
        for split in ("train", *task.eval_splits):
            rows = [_row(task, rng) for _ in range(n_train if split == "train" else n_eval)]
            with (task_dir / f"{split}.tsv").open("w", encoding="utf-8", newline="") as f:
                writer = csv.DictWriter(f, [*task.text_columns, "label"], delimiter="\t")
                writer.writeheader()
                writer.writerows(rows)
        written.append(task_dir)
    return written


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m neoembed.glue.synthetic DIR [TASK ...]")
    for path in write_synthetic(Path(sys.argv[1]), sys.argv[2:] or None):
        print(path)
