"""CLI options bound to typed settings, so each default, bound and help text is written once: on the model.

Two decorators turn a command `def verb(settings: SomeSettings, ...)` into a typer command:

- `options_from(SomeSettings)`: one option per field (nested sections flattened to their leaf names), with the
  field's docstring as help, its default shown, its bounds printed; the values given are validated into the
  settings, and a bad value is an `InputError` naming the flag.
- `recipe_options(SomeSettings)`: `--recipe NAME|FILE` (a packaged name or a YAML path), any number of
  `--section.field value` overrides, and optional shortcut flags bound to recipe fields (`--steps` ->
  `train.max_steps`); shortcut and override values win over the recipe file.

typer reads a command's options from its signature, so the decorators hand it a generated `__signature__`.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types
import typer
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from neoembed.cli.recipe_fields import RecipeBinding, RecipeCommand
from neoembed.errors import InputError
from neoembed.packaged import recipe_names, resolve_recipe
from neoembed.recipes import (
    apply_overrides,
    describe_validation_error,
    field_path,
    is_sequence,
    load_recipe,
    parse_overrides,
)
from neoembed.workflow import RecipeChoice

# How recipe verbs are registered: `--section.field value` overrides beyond their declared options, and a
# help that lists every recipe field.
RECIPE_COMMAND: dict[str, Any] = {
    "cls": RecipeCommand,
    "context_settings": {"allow_extra_args": True, "ignore_unknown_options": True},
}

_SIMPLE_TYPES = (bool, int, float, str, Path)


@dataclass(frozen=True)
class Flag:
    """How one settings field appears on the command line: its option names, and where its value goes."""

    field: str  # dotted path into the settings, e.g. "mining.dtype"
    names: tuple[str, ...] = ()  # e.g. ("--teacher-dtype",); default: --leaf-name
    envvar: str | None = None

    @classmethod
    def of(cls, settings_cls: type[BaseModel], select: typing.Callable, *names: str) -> Flag:
        """The flag of the field `select` reads, `Flag.of(GlueSettings, lambda s: s.optim.lr, "--lr")`: the
        field named through the settings (`recipes.field_path`), so a renamed field cannot leave it behind."""
        return cls(field_path(settings_cls, select), names)

    @property
    def option(self) -> str:
        return self.names[0] if self.names else "--" + self.field.rsplit(".", 1)[-1].replace("_", "-")

    @property
    def python_name(self) -> str:
        return self.field.replace(".", "__")


def options_from(
    settings_cls: type[BaseModel],
    *,
    flags: typing.Sequence[Flag] = (),
    exclude: typing.Collection[str] = (),
    cli_defaults: dict[str, Any] | None = None,
    cli_defaults_yield_to: str | None = None,
):
    """Give the command one option per leaf field of `settings_cls` (minus `exclude`, dotted paths).

    `flags` renames options or adds short names and environment variables; `cli_defaults` sets a default
    that the command line uses where the library's differs (shown in the help, validated like any value),
    except where the field `cli_defaults_yield_to` is given: then the options left unset keep the library's."""
    custom = {flag.field: flag for flag in flags}
    bound = [custom.get(path, Flag(path)) for path in _leaf_fields(settings_cls) if path not in exclude]
    _check_unique(bound)
    cli_defaults = cli_defaults or {}

    def decorate(command):
        options = []
        for flag in bound:
            field = _field(settings_cls, flag.field)
            options.append(_option(flag, field, cli_defaults.get(flag.field, _cli_default(field))))

        def build(values: dict[str, Any]) -> BaseModel:
            given = {f.field: values.pop(f.python_name) for f in bound}
            context = values.pop("ctx", None)
            if cli_defaults_yield_to is not None and given.get(cli_defaults_yield_to):
                for flag in bound:
                    source = context.get_parameter_source(flag.python_name)
                    if flag.field in cli_defaults and source is not None and source.name == "DEFAULT":
                        given[flag.field] = None
            # An option left at None leaves the field to the settings' own default.
            given = {path: value for path, value in given.items() if value is not None}
            return validate_options(settings_cls, apply_overrides({}, given), bound)

        if cli_defaults_yield_to is not None:  # which options the command line set: the context knows
            options.insert(
                0, inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
            )
        return _wrap(command, options, build)

    return decorate


def recipe_options(
    settings_cls: type[BaseModel],
    *,
    default_recipe: str | typing.Callable[[], str] | None = None,
    shortcuts: typing.Sequence[Flag] = (),
):
    """Give the command `--recipe`, `--section.field value` overrides and shortcut flags for recipe fields.

    `default_recipe` is the recipe run without `--recipe`: a name, or a function choosing one (from what
    earlier commands left, `neoembed.workflow`); None: `--recipe` is required. A command with a `recipe`
    parameter receives the `RecipeChoice` it runs. Register the command with `**RECIPE_COMMAND`, so the
    overrides reach it and its help lists every field."""

    def decorate(command):
        required = default_recipe is None
        if required:
            default_text = ""
        elif isinstance(default_recipe, str):
            default_text = f" Default: {default_recipe}."
        else:
            default_text = " Default: chosen from what is here, and named on the first line."
        recipe = inspect.Parameter(
            "recipe",
            inspect.Parameter.KEYWORD_ONLY,
            # Left out, the option is None, so the command knows the default was chosen for it.
            default=... if required else None,
            annotation=Annotated[
                typing.Optional[str],  # noqa: UP045 (a type built at run time)
                typer.Option(
                    "--recipe",
                    help=f"A recipe: a packaged name ({', '.join(recipe_names())}) or a YAML file.{default_text}",
                    show_default=False,
                ),
            ],
        )
        context = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
        # Shortcuts default to None: unset, the recipe's value stands.
        options = [_option(flag, _field(settings_cls, flag.field)) for flag in shortcuts]
        wants_choice = "recipe" in inspect.signature(command).parameters

        def build(values: dict[str, Any]) -> BaseModel:
            given = {f.field: values.pop(f.python_name) for f in shortcuts}
            overrides = {path: value for path, value in given.items() if value is not None}
            overrides.update(parse_overrides(values.pop("ctx").args))
            name = values.pop("recipe")
            choice = RecipeChoice(name, given=True) if name else RecipeChoice(binding.default(), given=False)
            if wants_choice:
                values["recipe"] = choice
            return load_recipe(resolve_recipe(choice.name), settings_cls, overrides)

        binding = RecipeBinding(settings_cls, default_recipe)
        run = _wrap(command, [context, recipe, *options], build, injected=("settings", "recipe"))
        run.recipe_binding = binding
        return run

    return decorate


def validate_options(settings_cls: type[BaseModel], data: dict, flags: typing.Sequence[Flag]) -> BaseModel:
    """`settings_cls` from option values; a validation error names the flag of each bad field."""
    option_of = {tuple(flag.field.split(".")): flag.option for flag in flags}

    def flag_of(loc: tuple) -> str | None:
        # An item of a list field is located by its index too: ("direct_batch_sizes", 1).
        return next((option_of[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in option_of), None)

    try:
        return settings_cls.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]["loc"]
        raise InputError(
            describe_validation_error(err, label=lambda loc: flag_of(tuple(loc)), model=settings_cls),
            param=flag_of(tuple(first)),
        ) from None


# Signature generation ------------------------------------------------------------------------------------


def _wrap(
    command, options: list[inspect.Parameter], build, injected: tuple[str, ...] = ("settings",)
) -> typing.Callable:
    """`command(settings, **rest)` behind a function whose signature is its other parameters (less those
    `build` supplies, `injected`) plus `options`."""
    parameters = inspect.signature(command, eval_str=True).parameters.values()
    own = [p for p in parameters if p.name not in injected]

    @functools.wraps(command)
    def run(**values):
        settings = build(values)
        return command(settings, **values)

    run.__signature__ = inspect.Signature([*own, *options])  # type: ignore[attr-defined]
    run.__annotations__ = {}  # typer takes each option's type from the signature above
    return run


def _option(flag: Flag, field: FieldInfo, default: Any = None) -> inspect.Parameter:
    """The typer parameter for one field: its type, help (docstring and bounds) and default."""
    cli_type = _cli_type(field.annotation)
    if isinstance(default, str) and typing.get_origin(cli_type) is list:
        cli_type = str  # a list the settings serialise as one comma-separated value (`CommaSeparated`)
    choices = None if cli_type is bool else _choices_text(field)  # a flag pair names its own choices
    help_text = " ".join(part for part in (field.description, choices, _bounds_text(field)) if part)
    if cli_type is bool:
        names = flag.names or (f"{flag.option}/--no-{flag.option[2:]}",)
        if not isinstance(default, bool):  # `bool | Literal["auto"]`: the flag left out is auto
            default = None
    else:
        names = (flag.option, *flag.names[1:])
    option = typer.Option(*names, help=help_text, envvar=flag.envvar, show_default=default is not None)
    return inspect.Parameter(
        flag.python_name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=Annotated[typing.Optional[cli_type], option],  # noqa: UP045 (a type built at run time)
    )


def _cli_default(field: FieldInfo) -> Any:
    """The field's default as the command line writes it; None where the settings compute it."""
    if field.default_factory is not None or field.default is None:
        return None
    # The field's metadata holds its serializer, e.g. a shard (0, 1) written "0/1".
    value = TypeAdapter(field.rebuild_annotation()).dump_python(field.default, mode="json")
    return None if value in ([], "") else value


def _cli_type(annotation) -> Any:
    """The type typer parses for a field. Types typer cannot parse (fixed-length tuples, mappings, custom
    types) are read as text, which the settings' validators parse."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if set(args) == {bool, Literal["auto"]}:  # a tri-state switch: --x, --no-x, or left out for auto
            return bool
        annotation = args[0] if len(args) == 1 else str
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if annotation in _SIMPLE_TYPES:
        return annotation
    items = typing.get_args(annotation)
    repeatable = is_sequence(annotation)
    return list[items[0]] if repeatable and items[0] in _SIMPLE_TYPES else str  # type: ignore[valid-type]


def _choices_text(field: FieldInfo) -> str | None:
    """`One of: a, b, c.` for a Literal field. The option itself is text, so a bad choice is reported by the
    settings' validation like any other bad value."""
    for annotation in (field.annotation, *typing.get_args(field.annotation)):
        if typing.get_origin(annotation) is Literal:
            return "One of: " + ", ".join(map(str, typing.get_args(annotation))) + "."
    return None


def _bounds_text(field: FieldInfo) -> str | None:
    """`[1<=x]`-style bounds from the field's constraints (also those inside `X | None`)."""
    lower = upper = ""
    for item in _constraints(field):
        if isinstance(item, annotated_types.Ge):
            lower = f"{item.ge}<="
        elif isinstance(item, annotated_types.Gt):
            lower = f"{item.gt}<"
        elif isinstance(item, annotated_types.Le):
            upper = f"<={item.le}"
        elif isinstance(item, annotated_types.Lt):
            upper = f"<{item.lt}"
    return f"[{lower}x{upper}]" if lower or upper else None


def _constraints(field: FieldInfo) -> list:
    found = list(field.metadata)
    for arg in typing.get_args(field.annotation):
        if typing.get_origin(arg) is Annotated:
            for meta in typing.get_args(arg)[1:]:
                found.extend(meta.metadata if isinstance(meta, FieldInfo) else [meta])
    return found


# Settings introspection ----------------------------------------------------------------------------------


def _leaf_fields(settings_cls: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, field in settings_cls.model_fields.items():
        section = field.annotation if isinstance(field.annotation, type) else None
        if section is not None and issubclass(section, BaseModel):
            paths.extend(_leaf_fields(section, f"{prefix}{name}."))
        else:
            paths.append(prefix + name)
    return paths


def _field(settings_cls: type[BaseModel], dotted: str) -> FieldInfo:
    *sections, leaf = dotted.split(".")
    model: Any = settings_cls  # each section's annotation is a settings model
    for section in sections:
        model = model.model_fields[section].annotation
    return model.model_fields[leaf]


def _check_unique(flags: list[Flag]) -> None:
    seen: dict[str, str] = {}
    for flag in flags:
        if flag.option in seen:
            raise TypeError(f"fields {seen[flag.option]} and {flag.field} both map to {flag.option}")
        seen[flag.option] = flag.field
