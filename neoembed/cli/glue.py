"""`neoembed glue`: fine-tune an encoder on GLUE tasks under the paper's protocol and print the table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from neoembed.cli.options import Flag, recipe_options
from neoembed.glue import GlueSettings
from neoembed.recipes import split_commas

console = Console()


@recipe_options(
    GlueSettings,
    default_recipe="glue",
    shortcuts=[
        Flag.of(GlueSettings, lambda s: s.train.max_epochs, "--epochs"),
        Flag.of(GlueSettings, lambda s: s.train.batch_size),
        Flag.of(GlueSettings, lambda s: s.optim.lr, "--lr"),
        Flag.of(GlueSettings, lambda s: s.optim.weight_decay),
        Flag.of(GlueSettings, lambda s: s.train.early_stopping_patience, "--patience"),
        Flag.of(GlueSettings, lambda s: s.max_length),
        Flag.of(GlueSettings, lambda s: s.train.eval_steps),
        Flag.of(GlueSettings, lambda s: s.max_train_samples),
        Flag.of(GlueSettings, lambda s: s.max_eval_samples),
        Flag.of(GlueSettings, lambda s: s.train.seed),
        Flag.of(GlueSettings, lambda s: s.train.precision),
        Flag.of(GlueSettings, lambda s: s.train.threads),
        Flag.of(GlueSettings, lambda s: s.transfer.enabled, "--transfer/--no-transfer"),
    ],
)
def glue(
    settings: GlueSettings,
    model: Annotated[
        str, typer.Option("--model", "-m", help="Encoder dir or hub id (NeoBERT, BERT, ...), or 'minilm'.")
    ],
    task: Annotated[
        list[str] | None,
        typer.Option(
            "--task",
            "-t",
            help="Repeatable or comma-separated: cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli, "
            "or 'all' (the recipe's tasks; by default the paper's eight, without WNLI).",
        ),
    ] = None,
    grid: Annotated[
        bool, typer.Option("--grid/--no-grid", help="Search the recipe's grid (default: its single point).")
    ] = False,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Local files DIR/<task>/{train,validation}.{csv,tsv,jsonl,parquet} (default: hub)."
        ),
    ] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="Runs, best models, table.")] = Path(
        "runs/glue"
    ),
    tokenizer: Annotated[
        str | None, typer.Option(help="Tokenizer dir or id when the model has none.")
    ] = None,
    mnli_checkpoint: Annotated[
        str | None, typer.Option(help="An MNLI fine-tuned model to transfer from (instead of running MNLI).")
    ] = None,
) -> None:
    """Fine-tune on GLUE tasks (paper's protocol: AdamW 0.9/0.95, 6% warmup, linear decay, early stopping).

    Any recipe field can also be set as `--field value` or `--section.field value` (e.g. --optim.betas
    "[0.9, 0.98]" --grid.lr "[1e-5, 2e-5]"); the flags above are shortcuts for the common ones."""
    from neoembed.glue import run_glue, select_tasks, write_report

    tasks = select_tasks(split_commas(task or []), settings.tasks)
    results = run_glue(
        model,
        tasks,
        settings,
        output,
        grid=grid,
        data_dir=data_dir,
        tokenizer_name=tokenizer,
        mnli_checkpoint=mnli_checkpoint,
        log=lambda line: console.print(line, markup=False, soft_wrap=True),
    )
    json_path, md_path = write_report(model, results, output)
    console.print(md_path.read_text(encoding="utf-8"), markup=False, soft_wrap=True)
    console.print(f"wrote {json_path} and {md_path}", markup=False)
