"""The `neoembed` command line: one typer app, one module per verb.

Each module in this package defines its command(s) and is registered here. Commands bind their options to
typed settings (`neoembed.cli.options`), then call library functions; they hold no logic of their own and
catch no errors: the one handler below turns any `NeoembedError` into `neoembed <verb>: message` on stderr
and the error's exit code (2 bad input, 1 failed run), with the traceback only under `neoembed --debug`. An
optional package a verb needs and lacks (`neoembed.extras`) ends the same way, naming the extra to install.
"""

from __future__ import annotations

import errno
import traceback

import typer
from typer.core import TyperGroup

from neoembed.errors import NeoembedError, from_os_error
from neoembed.extras import as_missing_package

DEBUG = "neoembed.debug"  # key in click's context meta, shared by every nested context


class CommandGroup(TyperGroup):
    """A group of verbs whose errors from the neoembed family, and the file system's, end as one line and an
    exit code."""

    def parse_args(self, ctx, args):
        for arg in args:
            if (refused := non_utf8_argument(arg)) is not None:
                typer.echo(f"neoembed: {refused}", err=True)
                ctx.exit(2)
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except NeoembedError as error:
            self._exit(ctx, error)
        except OSError as error:  # a path below a file, an unwritable place, a full disk
            if error.errno == errno.EPIPE:
                raise  # output piped into `head`: click ends quietly
            self._exit(ctx, from_os_error(error))
        except ModuleNotFoundError as error:
            missing = as_missing_package(error)  # an optional package the verb needs, imported where used
            if missing is None:
                raise
            self._exit(ctx, missing)

    @staticmethod
    def _exit(ctx, error: NeoembedError):
        verb = " ".join([*_group_names(ctx), ctx.invoked_subcommand or ""]).strip()
        if ctx.meta.get(DEBUG):
            traceback.print_exc()
        typer.echo(f"neoembed {verb}: {error.message}", err=True)
        raise typer.Exit(error.exit_code) from None


def non_utf8_argument(arg: str) -> str | None:
    """Why `arg` is refused, or None. Python hands a command-line byte that is not UTF-8 over as a lone
    surrogate (PEP 383), which no tokenizer or JSON writer accepts: say so before any work."""
    try:
        arg.encode("utf-8")
    except UnicodeEncodeError:
        try:
            shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a surrogate that no byte makes: passed by a caller, not by the shell
            shown = arg.encode("utf-8", "backslashreplace").decode()
        return f"argument '{shown}' is not valid UTF-8; pass text and paths in UTF-8"
    return None


def _group_names(ctx) -> list[str]:
    """The verbs above this group (`index` for `neoembed index build`), without the program's name, which
    is `neoembed`, `python -m neoembed` or a test runner's."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return names[::-1]


app = typer.Typer(
    name="neoembed",
    cls=CommandGroup,
    help="Build text-embedding models around NeoBERT.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def global_options(
    ctx: typer.Context,
    debug: bool = typer.Option(
        False, "--debug", help="Show the traceback of an error, not only its message."
    ),
) -> None:
    ctx.meta[DEBUG] = debug


def main() -> None:
    app()


# Verb registration, in the order of the pipeline; one module per verb.
from neoembed.cli import (  # noqa: E402
    adapt,
    bench,
    build_data,
    contrastive,
    encode,
    export,
    glue,
    index,
    info,
    mteb_eval,
    pretrain,
    quickstart,
    recipes,
    runs,
    search,
    serve,
)
from neoembed.cli.options import RECIPE_COMMAND  # noqa: E402

app.command()(info.info)
app.command()(encode.encode)
app.command(**RECIPE_COMMAND)(pretrain.pretrain)
app.command("build-data")(build_data.build_data)
app.command(**RECIPE_COMMAND)(contrastive.contrastive)
app.command(**RECIPE_COMMAND)(adapt.adapt)
app.command("mteb-eval")(mteb_eval.mteb_eval)
app.command("glue", **RECIPE_COMMAND)(glue.glue)
app.add_typer(recipes.app, name="recipes", cls=CommandGroup)
app.add_typer(index.app, name="index", cls=CommandGroup)
app.command("search")(search.search)
app.command("serve")(serve.serve)
app.add_typer(export.app, name="export", cls=CommandGroup)
app.add_typer(runs.app, name="runs", cls=CommandGroup)
app.command()(quickstart.quickstart)
app.add_typer(bench.app, name="bench", cls=CommandGroup)
