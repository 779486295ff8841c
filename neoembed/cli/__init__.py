"""The `neoembed` command line: one typer app, one module per verb.

Each module in this package defines its command(s) and is registered here. Commands parse and validate
their arguments, then call library functions; they hold no logic of their own.
"""

import typer

app = typer.Typer(
    name="neoembed",
    help="Build text-embedding models around NeoBERT.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def main() -> None:
    app()


# Verb registration, in the order of the pipeline; one module per verb.
from neoembed.cli import (  # noqa: E402
    bench,
    build_data,
    contrastive,
    encode,
    glue,
    index,
    info,
    mteb_eval,
    pretrain,
    quickstart,
    search,
    serve,
)

# Verbs that take `--section.field value` recipe overrides beyond their declared options.
RECIPE_OVERRIDES = {"allow_extra_args": True, "ignore_unknown_options": True}

app.command()(info.info)
app.command()(encode.encode)
app.command(context_settings=RECIPE_OVERRIDES)(pretrain.pretrain)
app.command("build-data")(build_data.build_data)
app.command(context_settings=RECIPE_OVERRIDES)(contrastive.contrastive)
app.command("mteb-eval")(mteb_eval.mteb_eval)
app.command("glue", context_settings=RECIPE_OVERRIDES)(glue.glue)
app.add_typer(index.app, name="index")
app.command("search")(search.search)
app.command("serve")(serve.serve)
app.command()(quickstart.quickstart)
app.add_typer(bench.app, name="bench")
