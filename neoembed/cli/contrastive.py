"""`neoembed contrastive --recipe R [--steps N] [--section.field value ...]`: InfoNCE fine-tuning + export."""

from __future__ import annotations

import typer

from neoembed.cli.options import Flag, recipe_options
from neoembed.contrastive import ContrastiveSettings


@recipe_options(ContrastiveSettings, shortcuts=[Flag("train.max_steps", ("--steps",))])
def contrastive(settings: ContrastiveSettings) -> None:
    """Fine-tune an encoder into a sentence embedder with InfoNCE and export it as a sentence-transformers
    directory; extra `--section.field value` pairs override the recipe (e.g. --train.batch_size 64
    --model.base path/to/neobert). Re-running resumes from the newest complete checkpoint."""
    from neoembed.contrastive import relative_change, run_contrastive
    from neoembed.training import release_process_group

    summary = run_contrastive(settings)
    release_process_group()
    typer.echo(f"steps: {summary['steps']}")
    before = summary["eval_before"] or {}
    for name, after in summary["eval_after"].items():
        scores = []
        for metric, value in after.items():
            was = before.get(name, {}).get(metric)
            change = relative_change(was, value)
            scores.append(
                f"{metric} {value:.4f}"
                if change is None
                else f"{metric} {was:.4f} -> {value:.4f} ({change:+.1%})"
            )
        typer.echo(f"held-out {name}: " + ", ".join(scores))
    if summary.get("export"):
        typer.echo(f"exported: {summary['export']}")
