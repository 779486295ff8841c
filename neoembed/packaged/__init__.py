"""Recipes and data manifests shipped with the package, readable by name from any install.

The files live at the repository's top level (`recipes/`, `data_manifests/`). This package holds a symlink to
each folder, so the same `importlib.resources` lookup finds them in a source checkout (PYTHONPATH), an
editable install, and a built wheel, where setuptools copies the files the links point to (package-data in
pyproject.toml). Nothing here locates files relative to the source tree.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from neoembed.errors import InputError


def _folder(name: str) -> Path:
    # A wheel installs as a directory, so the resource is a real path that readers can glob and open.
    return Path(str(resources.files(__name__).joinpath(name)))


def recipes_dir() -> Path:
    """The packaged recipes: the paper's settings and small CPU ones."""
    return _folder("recipes")


def manifests_dir() -> Path:
    """The packaged data manifests: one YAML per contrastive source."""
    return _folder("data_manifests")


def recipe_names() -> list[str]:
    return sorted(path.stem for path in recipes_dir().glob("*.yaml"))


def recipe_summary(path: Path) -> str:
    """What a recipe is for, in one line: the first line of the comment it opens with ("" without one)."""
    first = path.read_text(encoding="utf-8").lstrip().splitlines()[:1]
    return first[0].lstrip("#").strip() if first and first[0].startswith("#") else ""


def resolve_recipe(value: str | Path) -> Path:
    """A recipe file: `value` itself when it exists, else the packaged recipe it names.

    A name is given bare (`pretrain-cpu`), with its suffix, or as the docs write it (`recipes/pretrain-cpu.yaml`),
    so the documented commands work from any directory."""
    path = packaged_file(value, ".yaml")
    if path is None:
        raise InputError(
            f"recipe {str(value)!r} is neither a file nor a packaged recipe; packaged recipes: "
            + ", ".join(recipe_names()),
            param="--recipe",
        )
    return path


def resolve_recipe_file(value: str) -> str:
    """A file a recipe names (`train.deepspeed: recipes/deepspeed-zero2.json`): the path itself when it exists,
    else the packaged file of that name, so recipes that name shipped files run outside a checkout."""
    path = packaged_file(value, Path(value).suffix)
    if path is None:
        shipped = sorted(p.name for p in recipes_dir().iterdir() if p.suffix != ".yaml")
        raise ValueError(f"{value!r} is neither a file nor a packaged file (packaged: {', '.join(shipped)})")
    return str(path)


def packaged_file(value: str | Path, suffix: str) -> Path | None:
    """`value` when it is a file, else the packaged recipes' file it names (bare, with `suffix`, or under
    `recipes/`), else None."""
    path = Path(value)
    if path.is_file():
        return path
    if path.parent in (Path("."), Path("recipes")) and suffix:
        packaged = recipes_dir() / f"{path.name.removesuffix(suffix)}{suffix}"
        if packaged.is_file():
            return packaged
    return None
