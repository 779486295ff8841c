"""`neoembed glue`: fine-tune an encoder on GLUE tasks under the paper's protocol and print the table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console()


def glue(
    ctx: typer.Context,
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
    recipe: Annotated[
        Path | None, typer.Option(help="YAML recipe (default: the paper's protocol, recipes/glue.yaml).")
    ] = None,
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
    transfer: Annotated[
        bool | None,
        typer.Option(
            "--transfer/--no-transfer", help="Start the recipe's small tasks from the best MNLI run."
        ),
    ] = None,
    mnli_checkpoint: Annotated[
        str | None, typer.Option(help="An MNLI fine-tuned model to transfer from (instead of running MNLI).")
    ] = None,
    epochs: Annotated[float | None, typer.Option(help="Max epochs (early stopping may end sooner).")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Batch size without --grid.")] = None,
    lr: Annotated[float | None, typer.Option(help="Learning rate without --grid.")] = None,
    weight_decay: Annotated[float | None, typer.Option(help="Weight decay without --grid.")] = None,
    patience: Annotated[
        int | None, typer.Option(help="Evaluations without improvement before stopping.")
    ] = None,
    max_length: Annotated[int | None, typer.Option(help="Max tokens per example.")] = None,
    eval_steps: Annotated[
        int | None, typer.Option(help="Evaluate every N steps (default: each epoch).")
    ] = None,
    max_train_samples: Annotated[int | None, typer.Option(help="Train on a seeded sample of N rows.")] = None,
    max_eval_samples: Annotated[
        int | None, typer.Option(help="Evaluate on a seeded sample of N rows.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Training and sampling seed.")] = None,
    bf16: Annotated[bool | None, typer.Option("--bf16/--fp32", help="bf16 mixed precision.")] = None,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's).")] = None,
) -> None:
    """Fine-tune on GLUE tasks (paper's protocol: AdamW 0.9/0.95, 6% warmup, linear decay, early stopping).

    Any recipe field can also be set as `--field value` or `--section.field value` (e.g. --adam_beta2 0.98
    --grid.learning_rate "[1e-5, 2e-5]"); the flags above are shortcuts for the common ones."""
    from neoembed.evaluation.glue import GlueError, load_settings, run_glue, select_tasks, write_report
    from neoembed.recipes import RecipeError, dump_recipe, parse_overrides

    if threads:
        import torch

        torch.set_num_threads(threads)
    try:
        shortcuts = {
            "max_epochs": epochs,
            "batch_size": batch_size,
            "learning_rate": lr,
            "weight_decay": weight_decay,
            "early_stopping_patience": patience,
            "max_length": max_length,
            "eval_steps": eval_steps,
            "max_train_samples": max_train_samples,
            "max_eval_samples": max_eval_samples,
            "seed": seed,
            "bf16": bf16,
            "transfer.enabled": transfer,
        }
        overrides = {key: value for key, value in shortcuts.items() if value is not None}
        settings = load_settings(recipe, {**overrides, **parse_overrides(ctx.args)})
        dump_recipe(settings, output / "recipe.yaml")
        tasks = select_tasks([n for item in task or [] for n in item.split(",")], settings.tasks)
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
    except (GlueError, RecipeError) as err:
        console.print(f"error: {err}", style="red", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    json_path, md_path = write_report(model, results, output)
    console.print(md_path.read_text(encoding="utf-8"), markup=False, soft_wrap=True)
    console.print(f"wrote {json_path} and {md_path}", markup=False)
