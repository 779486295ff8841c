"""Every field of a recipe, described from its settings class: for the help of the recipe verbs and `recipes`.

A field's type comes from its annotation, its meaning from the first sentence of its docstring, and its value
from the chosen recipe (or the settings' default where the recipe sets none), so nothing is written twice.
`RecipeCommand` appends one table per recipe section to `neoembed pretrain|contrastive|glue --help`.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined, to_jsonable_python
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand

from neoembed.errors import InputError
from neoembed.packaged import resolve_recipe
from neoembed.recipes import load_recipe, section_model

TOP_LEVEL = "general"  # the section of fields that sit at a recipe's top level


@dataclass(frozen=True)
class FieldHelp:
    """One recipe field as the help shows it."""

    path: str  # dotted, as `--path value` overrides it
    type: str  # e.g. "int", "{auto,fp32,bf16}", "list[str] | null"
    value: str  # in the recipe, YAML-written; "(required)" where neither recipe nor settings give one
    meaning: str  # the first sentence of the field's docstring


@dataclass(frozen=True)
class RecipeBinding:
    """What a recipe verb validates its recipe into; `recipe_options` attaches it to the command."""

    settings_cls: type[BaseModel]
    default_recipe: str | typing.Callable[[], str] | None

    def default(self) -> str | None:
        """The recipe run without `--recipe` (chosen now where a function chooses it)."""
        recipe = self.default_recipe
        return recipe() if callable(recipe) else recipe


def recipe_values(settings_cls: type[BaseModel], recipe: str | Path) -> dict[str, Any]:
    """The recipe's settings with every default filled in, as plain data (an `InputError` when invalid)."""
    return load_recipe(resolve_recipe(recipe), settings_cls).model_dump(mode="json")


def field_help(settings_cls: type[BaseModel], values: dict[str, Any] | None) -> dict[str, list[FieldHelp]]:
    """Every field of `settings_cls` by section (top-level fields under `general`), valued from `values` (a
    recipe's `recipe_values`), or from the settings' defaults where None."""
    sections: dict[str, list[FieldHelp]] = {}
    for row in _rows(settings_cls, values, ""):
        section = row.path.split(".", 1)[0] if "." in row.path else TOP_LEVEL
        sections.setdefault(section, []).append(row)
    return dict(sorted(sections.items(), key=lambda item: item[0] != TOP_LEVEL))


def _rows(model: type[BaseModel], values: dict[str, Any] | None, prefix: str) -> typing.Iterator[FieldHelp]:
    for name, field in model.model_fields.items():
        path = prefix + name
        if values is not None and name in values:
            value = values[name]
        elif field.is_required():
            value = PydanticUndefined
        else:
            value = to_jsonable_python(field.get_default(call_default_factory=True))
        section = section_model(field.annotation)
        optional = type(None) in typing.get_args(field.annotation)
        if section is None or optional:
            meaning = field.description or section.__doc__ or ""
            yield FieldHelp(path, type_text(field.annotation), written(value), _first_sentence(meaning))
        if section is not None:
            # An unset optional section's fields are shown with their defaults: what setting one gives.
            yield from _rows(section, value if isinstance(value, dict) else None, path + ".")


def differences(
    settings_cls: type[BaseModel], first: dict[str, Any], second: dict[str, Any]
) -> list[tuple[str, str, str]]:
    """(field, value in `first`, value in `second`) for every field two recipes' values set apart."""
    rows = zip(_rows(settings_cls, first, ""), _rows(settings_cls, second, ""))
    return [(a.path, a.value, b.value) for a, b in rows if a.value != b.value]


def type_text(annotation: Any) -> str:
    """A field's type as a user writes its value: `int`, `{mean,cls}`, `list[float] | null`, `section`."""
    if annotation is type(None):
        return "null"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(arg) for arg in args)
    if origin is Literal:
        return "{" + ",".join(map(str, args)) + "}"
    if section_model(annotation) is not None:
        return "section"
    if origin is not None:
        items = ", ".join("..." if arg is Ellipsis else type_text(arg) for arg in args)
        return f"{origin.__name__}[{items}]"
    return getattr(annotation, "__name__", str(annotation))


def written(value: Any) -> str:
    """A field's value as a recipe (or a `--field value` override) writes it, in YAML's flow style."""
    if value is PydanticUndefined:
        return "(required)"
    text = yaml.safe_dump(_without_nulls(value), default_flow_style=True, width=10**6).strip()
    return text.removesuffix("...").strip()


def _without_nulls(value: Any) -> Any:
    """Sections inside a value (e.g. held-out sets) without their unset fields, which only add noise."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    match = re.search(r"(?<=\.)\s(?=[A-Z])", text)
    return text[: match.start()] if match else text


class RecipeCommand(TyperCommand):
    """A recipe verb whose `--help` also lists every recipe field, valued from `--recipe` when given."""

    def parse_args(self, ctx, args):
        # --help is handled while parsing, before --recipe has a value: keep the raw arguments to find it.
        ctx.meta["neoembed.raw_args"] = list(args)
        return super().parse_args(ctx, args)

    def format_help(self, ctx, formatter) -> None:
        super().format_help(ctx, formatter)
        binding: RecipeBinding = self.callback.recipe_binding  # type: ignore[union-attr]  # set by recipe_command
        recipe = _recipe_argument(ctx.meta.get("neoembed.raw_args", [])) or binding.default()
        values, source = None, "the settings' defaults"
        if recipe is not None:
            try:
                values, source = recipe_values(binding.settings_cls, recipe), f"recipe {recipe}"
            except InputError as err:
                source = f"the settings' defaults (recipe {recipe}: {err.message})"
        console = Console()
        console.print(
            " Recipe fields: override any with --section.field value (a list: one value, a,b or [a, b])."
            f" Values from {source}.",
            markup=False,
        )
        for section, rows in field_help(binding.settings_cls, values).items():
            table = Table(title=section, title_justify="left", expand=True, show_edge=False)
            for column, ratio in (("option", 3), ("type", 2), ("value", 2), ("meaning", 6)):
                table.add_column(column, overflow="fold", ratio=ratio)
            for row in rows:
                # Text, not markup: values and types hold brackets ([0.9, 0.95], list[str]).
                table.add_row(*(Text(cell) for cell in ("--" + row.path, row.type, row.value, row.meaning)))
            console.print(table)


def _recipe_argument(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--recipe" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--recipe="):
            return arg.split("=", 1)[1]
    return None
