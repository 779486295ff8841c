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


# Verb registration: one line per module keeps the command list readable in one place.
from neoembed.cli import bench, encode, info, quickstart  # noqa: E402

app.command()(info.info)
app.command()(encode.encode)
app.command()(quickstart.quickstart)
app.add_typer(bench.app, name="bench")

from neoembed.cli import index, search  # noqa: E402

app.add_typer(index.app, name="index")
app.command("search")(search.search)

from neoembed.cli import mteb_eval  # noqa: E402

app.command("mteb-eval")(mteb_eval.mteb_eval)

from neoembed.cli import build_data  # noqa: E402

app.command("build-data")(build_data.build_data)

from neoembed.cli import serve  # noqa: E402

app.command("serve")(serve.serve)

from neoembed.cli import pretrain  # noqa: E402

app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(pretrain.pretrain)

from neoembed.cli import glue  # noqa: E402

app.command("glue", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(glue.glue)

from neoembed.cli import contrastive  # noqa: E402

app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
    contrastive.contrastive
)
