"""Recipes: YAML files validated into typed pydantic settings, with command-line overrides.

Every command declares its settings as a pydantic model (`StrictSettings`); the CLI binds its options to the
model's fields (`neoembed.cli.options`). For the jobs that take a recipe (`pretrain`, `contrastive`, `glue`),
`load_recipe` reads a YAML file into the model, applies `--dotted.field value` overrides, and turns any
validation error into one message that names the file and each bad field.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from neoembed.errors import InputError
from neoembed.packaged import resolve_recipe_file

Settings = TypeVar("Settings", bound=BaseModel)


class RecipeError(InputError):
    """A recipe or override that does not validate; the message names the file and the fields."""


# A recipe field naming a file (a DeepSpeed config): a path, or a file shipped beside the packaged recipes.
PackagedFile = Annotated[str, AfterValidator(resolve_recipe_file)]


def split_commas(value: Any) -> Any:
    """`"a,b"` (one flag value) or `["a,b", "c"]` (a repeated flag) -> `["a", "b", "c"]`; other values as given."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        return value
    return [part.strip() for item in value for part in str(item).split(",") if part.strip()]


def is_sequence(annotation: Any) -> bool:
    """Whether a field holds a list of any length (`list[X]`, `tuple[X, ...]`, optional or annotated)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return is_sequence(args[0])
    if origin in (typing.Union, types.UnionType):
        return all(is_sequence(arg) for arg in args if arg is not type(None))  # not `str | list[str]`
    return origin is list or (origin is tuple and args[1:] == (Ellipsis,))


Sequence_ = TypeVar("Sequence_")

# A sequence field that the command line writes as one comma-separated value (`--dtypes fp32,bf16`):
# `CommaSeparated[tuple[str, ...]]`, a generic alias that pydantic and type checkers both read.
CommaSeparated = Annotated[
    Sequence_,
    BeforeValidator(split_commas),
    PlainSerializer(lambda items: ",".join(map(str, items)), when_used="json"),
]


class StrictSettings(BaseModel):
    """Base for every command's settings: unknown fields are errors, values are type-checked, and a field's
    docstring is its description (the help of the CLI option bound to it)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _one_value_lists(cls, data: Any) -> Any:
        """A list field given one value, as `--corpus.eval_texts queries.txt` or `--pairs.methods lead,terms`
        override it, is the list of that value or of its comma-separated parts (YAML's `[a, b]` still works)."""
        if not isinstance(data, dict):
            return data
        lifted = {
            name: split_commas(value) if isinstance(value, str) else [value]
            for name, value in data.items()
            if name in cls.model_fields
            and isinstance(value, str | int | float)
            and not isinstance(value, bool)
            and is_sequence(cls.model_fields[name].annotation)
        }
        return {**data, **lifted} if lifted else data

    @classmethod
    def of(cls: type[Settings], settings: Settings | None = None, /, **fields: Any) -> Settings:
        """`settings` (default: the defaults) with `fields` set: how a library function takes either its
        settings or the same fields as keyword arguments. A bad field is an `InputError` naming it."""
        if settings is not None and not fields:
            return settings
        data = settings.model_dump() if settings is not None else {}
        try:
            return cls.model_validate({**data, **fields})
        except ValidationError as err:
            first = ".".join(str(p) for p in err.errors()[0]["loc"]) or None
            raise InputError(
                f"{cls.__name__}: {describe_validation_error(err, model=cls)}", param=first
            ) from None


def describe_validation_error(
    err: ValidationError,
    label: Callable[[tuple], str | None] | None = None,
    model: type[BaseModel] | None = None,
) -> str:
    """`field a.b: unknown field (did you mean: c?); field c: Input should be a valid integer` for each problem.

    `label` names a field's location another way (the CLI passes its flag, `--max-rows`); where it gives
    None, a check of the whole settings, the message stands alone. With `model`, the settings validated, an
    unknown field is told the nearest valid names of its section (or all of them when none is near)."""

    def short(error: ErrorDetails) -> str:
        if error["type"] == "extra_forbidden":
            return "unknown field" + _nearest_names(model, error["loc"])
        return error["msg"].removeprefix("Value error, ")

    def where(loc: tuple) -> str | None:
        if label is not None:
            return label(loc)
        return f"field {'.'.join(str(p) for p in loc) or '(top level)'}"

    problems = []
    for error in err.errors():
        name = where(error["loc"])
        if error["type"] == "literal_error" and name:
            problems.append(f"{name} must be one of {error['ctx']['expected']}, got {error['input']!r}")
        else:
            problems.append(f"{name}: {short(error)}" if name else short(error))
    return "; ".join(problems)


def _nearest_names(model: type[BaseModel] | None, loc: tuple) -> str:
    """` (did you mean: a, b?)` from the valid names beside the unknown field at `loc`; `` without a model."""
    section = _section_at(model, loc[:-1]) if model is not None else None
    if section is None:
        return ""
    valid = list(section.model_fields)
    near = difflib.get_close_matches(str(loc[-1]), valid, n=3, cutoff=0.6)
    return f" (did you mean: {', '.join(near)}?)" if near else f" (valid: {', '.join(valid)})"


def _section_at(model: type[BaseModel] | None, loc: tuple) -> type[BaseModel] | None:
    """The settings class at `loc` inside `model` (list indices and mapping keys stepped over), or None."""
    node: Any = model
    for part in loc:
        node = section_model(node) or node
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = node.model_fields.get(str(part))
            if field is None:
                return None
            node = field.annotation
        else:  # a list item or a mapping's value: `part` is its index or key
            args = typing.get_args(node)
            node = args[-1] if args else None
    return section_model(node)


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The settings class a field's annotation holds (`LoraSettings | None` -> LoraSettings), or None for a
    value field (a list of sections included: its items are values of the field)."""
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if section_model(a) is not None]
        return section_model(models[0]) if len(models) == 1 else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


S = TypeVar("S", bound=BaseModel)


class _FieldRecorder:
    """Stands in for a settings object inside `field_path`'s selector: each attribute read is checked against
    the settings class and recorded."""

    def __init__(self, model: type[BaseModel] | None, path: tuple[str, ...]) -> None:
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_path", path)

    def __getattr__(self, name: str) -> _FieldRecorder:
        model, path = object.__getattribute__(self, "_model"), object.__getattribute__(self, "_path")
        if model is None or name not in model.model_fields:
            where = ".".join(path) or "the settings"
            raise AttributeError(
                f"{where} has no field {name!r}{_nearest_names(model, (name,)) if model else ''}"
            )
        return _FieldRecorder(section_model(model.model_fields[name].annotation), (*path, name))


def field_path(settings: type[S], select: Callable[[S], object]) -> str:
    """The dotted path of the recipe field `select` reads: `field_path(ContrastiveSettings, lambda s:
    s.train.output_dir)` is "train.output_dir". The one way code names a field: checked against the settings
    classes when it runs, and, the selector being typed by `settings`, followed by type checkers and renamed with
    the field by an IDE."""
    recorded = select(_FieldRecorder(settings, ()))  # type: ignore[arg-type]
    if not isinstance(recorded, _FieldRecorder) or not object.__getattribute__(recorded, "_path"):
        raise TypeError(
            "the selector must return a field of the settings it is given, as in `lambda s: s.train.seed`"
        )
    return ".".join(object.__getattribute__(recorded, "_path"))


def flag(settings: type[S], select: Callable[[S], object]) -> str:
    """The command-line override of the field `select` reads: `--train.output_dir` (see `field_path`)."""
    return "--" + field_path(settings, select)


def override_args(settings: type[S], *fields: tuple[Callable[[S], object], object]) -> list:
    """Command-line overrides of several fields: `override_args(PretrainSettings, (lambda r: r.train.seed, 3))`
    is `["--train.seed", 3]` (see `flag`)."""
    return [arg for select, value in fields for arg in (flag(settings, select), value)]


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The top-level mapping of a YAML file, or a RecipeError naming the file."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise RecipeError(f"{path}: cannot read: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise RecipeError(
            f"{path}: not UTF-8 text (byte {err.start} is {err.object[err.start]:#04x})"
        ) from err
    except yaml.YAMLError as err:
        raise RecipeError(f"{path}: not valid YAML: {err}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: expected a mapping of fields at the top level")
    return data


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """`["--optim.lr", "3e-4", "--max-steps=10"]` -> `{"optim.lr": 3e-4, "max_steps": 10}`.

    Values are parsed as YAML scalars, so numbers, booleans and null come out typed; dashes in field names
    become underscores.
    """
    overrides: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or arg == "--":
            raise RecipeError(f"expected --field value, got {arg!r}")
        key, sep, value = arg[2:].partition("=")
        if not sep:
            if i + 1 >= len(args):
                raise RecipeError(f"--{key} needs a value")
            value = args[i + 1]
            i += 1
        overrides[key.replace("-", "_")] = yaml.safe_load(value)
        i += 1
    return overrides


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A copy of `data` with each dotted key set, creating nested mappings as needed."""
    merged = _deep_copy(data)
    for dotted, value in overrides.items():
        node = merged
        *parents, leaf = dotted.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise RecipeError(f"--{dotted}: {part!r} is not a section")
            node = child
        node[leaf] = value
    return merged


def _deep_copy(data: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in data.items()}


def load_recipe(
    path: Path | None, settings_cls: type[Settings], overrides: dict[str, Any] | None = None
) -> Settings:
    """Validate the recipe at `path` (or only defaults when None) plus overrides into `settings_cls`."""
    data = read_yaml_mapping(path) if path is not None else {}
    data = apply_overrides(data, overrides or {})
    try:
        return settings_cls.model_validate(data)
    except ValidationError as err:
        where = str(path) if path is not None else "settings"
        first = ".".join(str(p) for p in err.errors()[0]["loc"]) or None
        raise RecipeError(
            f"{where}: {describe_validation_error(err, model=settings_cls)}", param=first
        ) from None


def dump_recipe(settings: BaseModel, path: Path) -> None:
    """Write the resolved settings next to a job's outputs, so a run records exactly what it ran."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(settings.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
