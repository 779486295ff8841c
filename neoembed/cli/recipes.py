"""`neoembed recipes [show NAME | diff A B]`: the packaged recipes, one of them in full, or what two set apart."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table
from rich.text import Text

from neoembed.adapt import AdaptSettings
from neoembed.cli.recipe_fields import differences, recipe_values
from neoembed.contrastive import ContrastiveSettings
from neoembed.errors import InputError
from neoembed.glue import GlueSettings
from neoembed.packaged import recipe_names, recipe_summary, resolve_recipe
from neoembed.pretrain import PretrainSettings

# The verbs that take a recipe, and the settings each validates its recipe into.
RECIPE_VERBS: dict[str, type[BaseModel]] = {
    "pretrain": PretrainSettings,
    "contrastive": ContrastiveSettings,
    "adapt": AdaptSettings,
    "glue": GlueSettings,
}

app = typer.Typer(
    help="The packaged recipes: alone, list them; `show NAME` prints one, `diff A B` compares two."
)


@app.callback(invoke_without_command=True)
def recipes(ctx: typer.Context) -> None:
    """List the packaged recipes: the verb that runs each, and what it is for."""
    if ctx.invoked_subcommand is not None:
        return
    table = Table(show_edge=False)
    for column in ("recipe", "verb", "what it is for"):
        table.add_column(column)
    for name in recipe_names():
        path = resolve_recipe(name)
        table.add_row(name, recipe_verb(path) or "?", Text(recipe_summary(path)))
    console = Console()  # made per call, not at import: its width is the terminal's (or COLUMNS) now
    console.print(table)
    console.print(
        "neoembed recipes show NAME prints one; neoembed VERB --recipe NAME --help lists its fields."
    )


@app.command()
def show(name: Annotated[str, typer.Argument(help="A packaged recipe name or a YAML file.")]) -> None:
    """Print a recipe as written: the comment it opens with (what it is for, how to launch it), then its fields."""
    typer.echo(resolve_recipe(name).read_text(encoding="utf-8"), nl=False)


@app.command()
def diff(
    first: Annotated[str, typer.Argument(help="A packaged recipe name or a YAML file.")],
    second: Annotated[str, typer.Argument(help="Another recipe for the same verb.")],
) -> None:
    """The fields whose values two recipes of one verb set apart, defaults filled in."""
    paths = resolve_recipe(first), resolve_recipe(second)
    verbs = [recipe_verb(path) for path in paths]
    for name, verb in zip((first, second), verbs):
        if verb is None:
            raise InputError(f"{name}: not a valid recipe for any of {', '.join(RECIPE_VERBS)}", param=name)
    first_verb, second_verb = verbs
    if first_verb is None or first_verb != second_verb:
        raise InputError(
            f"{first} is a {first_verb} recipe and {second} a {second_verb} one: nothing to compare"
        )
    settings_cls = RECIPE_VERBS[first_verb]
    rows = differences(settings_cls, *(recipe_values(settings_cls, path) for path in paths))
    if not rows:
        typer.echo(f"{first} and {second} set every field alike")
        return
    table = Table(show_edge=False)
    for column in ("field", first, second):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    Console().print(table)


def recipe_verb(path: Path) -> str | None:
    """The verb whose settings `path` validates into (None when none does)."""
    for verb, settings_cls in RECIPE_VERBS.items():
        try:
            recipe_values(settings_cls, path)
        except InputError:
            continue
        return verb
    return None
