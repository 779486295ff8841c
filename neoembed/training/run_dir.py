"""A run directory records its recipe and only resumes with the same one."""

from __future__ import annotations

import json
import os
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from neoembed.recipes import RecipeError, dump_recipe
from neoembed.run_files import one_writer, write_text
from neoembed.training.checkpoints import last_complete_checkpoint

RECIPE_RECORD = "recipe.json"  # in a run directory: the recipe the run trains with, every field spelled out

# What may change between a run and its resume without changing what is trained: section -> its fields that
# may (None: the whole section). `eval` says which held-out sets are scored and how; nothing trains on them.
RESUMABLE_CHANGES: dict[str, set[str] | None] = {
    "train": {
        "log_steps",
        "eval_steps",
        "save_steps",
        "keep_checkpoints",
        "num_workers",
        "threads",
        "compile",
        "elastic",
    },
    "eval": None,
    "export": None,  # applied after training
}


def run_lock(output_dir: Path) -> AbstractContextManager:
    """The run directory's one-writer lock, held by the first rank for the whole run (the other ranks of the
    same launch write under its hold); a second launch into the same directory stops at once."""
    if int(os.environ.get("RANK", "0")) != 0:
        return nullcontext()
    return one_writer(output_dir, "run", param="train.output_dir")


def open_run(settings: BaseModel, output_dir: Path) -> str | None:
    """Check `output_dir` against the recipe `settings` (recording it, as recipe.json and recipe.yaml, on the
    first start) and return the checkpoint to resume from (None: start from scratch)."""
    check_resume_compatible(settings, output_dir)
    dump_recipe(settings, output_dir / "recipe.yaml")
    return last_complete_checkpoint(output_dir)


def recorded_recipe(output_dir: Path) -> dict[str, Any]:
    """The recipe a run directory recorded on its first start (every field, as JSON)."""
    return json.loads((Path(output_dir) / RECIPE_RECORD).read_text())


def check_resume_compatible(settings: BaseModel, output_dir: Path) -> None:
    """A run may only resume with the same recipe (apart from RESUMABLE_CHANGES: logging/saving cadence, the
    held-out evaluation and the export)."""
    recorded = output_dir / RECIPE_RECORD
    current = settings.model_dump(mode="json")
    if recorded.exists():
        previous = json.loads(recorded.read_text())
        differences = [
            f"{section}.{field}"
            for section, values in current.items()
            for field, value in values.items()
            if not _resumable(section, field)
            and not _same_as_recorded(settings, previous, section, field, value)
        ]
        if differences:
            raise RecipeError(
                f"{output_dir} holds a run with a different recipe (fields {', '.join(differences)}); "
                "use another train.output_dir or the same recipe"
            )
    else:
        output_dir.mkdir(parents=True, exist_ok=True)
        write_text(recorded, json.dumps(current, indent=2))


def _resumable(section: str, field: str) -> bool:
    fields = RESUMABLE_CHANGES.get(section, set())
    return fields is None or field in fields


def _same_as_recorded(settings: BaseModel, previous: dict, section: str, field: str, value) -> bool:
    """Whether a field's value matches the recorded run's. A field the recorded run predates (added to the
    settings since) matches when this run leaves it at its default, so runs from older versions resume."""
    recorded = previous.get(section, {})
    if field in recorded:
        return recorded[field] == value
    info = type(getattr(settings, section)).model_fields[field]
    return not info.is_required() and to_jsonable_python(info.get_default(call_default_factory=True)) == value
