"""Every recipe field named anywhere exists: as a command-line override (`--train.output_dir`) or in backquotes
(`loss.distill.teacher`) in the code, the recipes, the README and the docs, it resolves in the settings of
pretrain, contrastive, adapt or GLUE; so does each error's `param="section.field"`. Code names fields through
`recipes.field_path` / `recipes.flag` / `Flag.of`, which check them when they run; this test covers the text."""

from __future__ import annotations

import importlib
import re
import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from neoembed.adapt import AdaptSettings
from neoembed.contrastive import ContrastiveSettings
from neoembed.glue import GlueSettings
from neoembed.pretrain import PretrainSettings
from neoembed.recipes import field_path, flag, override_args

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = (PretrainSettings, ContrastiveSettings, AdaptSettings, GlueSettings)
SECTIONS = sorted({name for settings in SETTINGS for name in settings.model_fields if "_" not in name})
FIELD = rf"(?:{'|'.join(SECTIONS)})(?:\.[a-z_0-9]+)+"
OVERRIDE = re.compile(rf"--({FIELD})\b")
PARAM = re.compile(rf"param=\"({FIELD})\"")  # an error's `param`, the field it concerns
QUOTED = re.compile(rf"`({FIELD})(?:[`:= ])")
# Backquoted names of the same shape that are not recipe fields: methods, files, and a field of earlier
# recipes named where the docs say it is refused.
NOT_FIELDS = {
    "model.encode",
    "model.safetensors",
    "model.onnx",
    "model.save",
    "model.max_seq_length",
    "eval.kind",
    "corpus.jsonl",  # a BEIR folder's file (data.retrieval_sets)
}


def _strip_optional(annotation):
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kept = [a for a in typing.get_args(annotation) if a is not type(None)]
        return kept[0] if len(kept) == 1 else annotation
    return annotation


def resolves(settings: type[BaseModel], path: str) -> bool:
    node: typing.Any = settings
    for part in path.split("."):
        node = _strip_optional(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            if part not in node.model_fields:
                return False
            node = node.model_fields[part].annotation
        elif typing.get_origin(node) is dict:  # a mapping field takes any key
            node = typing.get_args(node)[1] if typing.get_args(node) else typing.Any
        else:
            return node is typing.Any
    return True


def texts() -> list[Path]:
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "recipes").glob("*.yaml")]
    files += [p for p in (ROOT / "neoembed").rglob("*.py")] + list((ROOT / "scripts").glob("*"))
    return [p for p in files if p.is_file()]


def named_fields() -> dict[str, list[str]]:
    """field path -> where it is named (file:line)."""
    found: dict[str, list[str]] = {}
    for path in texts():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            for match in [*OVERRIDE.findall(line), *QUOTED.findall(line), *PARAM.findall(line)]:
                found.setdefault(match.rstrip("."), []).append(f"{path.relative_to(ROOT)}:{number}")
    return found


def is_code(name: str) -> bool:
    """`data.normalize`, `data.text_key`, `loss.py`: a module, a file or a public name of neoembed's code."""
    first, second = name.split(".")[:2]
    package = ROOT / "neoembed" / first
    return (
        second == "py"
        or (package / f"{second}.py").is_file()
        or (package / second).is_dir()
        or (package.is_dir() and second in importlib.import_module(f"neoembed.{first}").__all__)
    )


def test_every_field_the_text_names_exists():
    found = named_fields()
    assert len(found) > 50, "the patterns should find the many fields the docs name"
    in_run_dir = [
        place for place in found["train.output_dir"] if place.startswith("neoembed/training/run_dir.py")
    ]
    assert in_run_dir, "an error's param (run_lock's param=) is read too"
    missing = {
        name: places[:3]
        for name, places in found.items()
        if name not in NOT_FIELDS
        and not is_code(name)
        and not any(resolves(settings, name) for settings in SETTINGS)
    }
    assert missing == {}


def test_code_names_a_field_through_the_settings():
    assert field_path(ContrastiveSettings, lambda s: s.loss.distill.teacher) == "loss.distill.teacher"
    assert flag(PretrainSettings, lambda s: s.train.output_dir) == "--train.output_dir"
    pairs = (lambda r: r.train.seed, 3), (lambda r: r.optim.lr, 1e-4)
    assert override_args(ContrastiveSettings, *pairs) == ["--train.seed", 3, "--optim.lr", 1e-4]
    with pytest.raises(AttributeError, match="train has no field 'outptu_dir' \\(did you mean: output_dir"):
        field_path(ContrastiveSettings, lambda s: s.train.outptu_dir)
    with pytest.raises(AttributeError, match="train.seed has no field"):
        field_path(ContrastiveSettings, lambda s: s.train.seed.value)
    with pytest.raises(TypeError, match="must return a field"):
        field_path(ContrastiveSettings, lambda s: "train.seed")


def test_a_recipe_that_is_not_utf8_is_refused_naming_the_byte(tmp_path):
    from neoembed.recipes import RecipeError, load_recipe

    recipe = tmp_path / "bad.yaml"
    recipe.write_bytes(b"train:\n  max_steps: 3\xff\n")
    with pytest.raises(RecipeError, match=r"bad.yaml: not UTF-8 text \(byte 21 is 0xff\)"):
        load_recipe(recipe, PretrainSettings)
