"""`neoembed adapt --model M --corpus F --out D [--recipe R] [--section.field value ...]`: domain adaptation
on a bare corpus."""

from __future__ import annotations

import typer

from neoembed.adapt import AdaptSettings
from neoembed.cli.options import Flag, recipe_options


@recipe_options(
    AdaptSettings,
    default_recipe="adapt-cpu",
    shortcuts=[
        Flag.of(AdaptSettings, lambda s: s.model.base, "--model"),
        Flag.of(AdaptSettings, lambda s: s.corpus.path, "--corpus"),
        Flag.of(AdaptSettings, lambda s: s.train.output_dir, "--out"),
        Flag.of(AdaptSettings, lambda s: s.train.max_steps, "--steps"),
    ],
)
def adapt(settings: AdaptSettings) -> None:
    """Adapt an encoder to your documents, with no labelled pairs: pairs are made from the documents (random
    crops, first sentence -> rest, rare words -> document), a held-out share of them chooses how much of the
    base model to keep, and the adapted model is exported as a sentence-transformers directory. Re-running
    resumes."""
    from neoembed.adapt import run_adapt

    result = run_adapt(settings)
    corpus = result.corpus
    reasons = {"empty": corpus.empty, "short": corpus.short, "duplicates": corpus.duplicates}
    left_out = ", ".join(f"{n} {reason}" for reason, n in reasons.items() if n)
    leaked = ", ".join(f"{n} {name} evaluation queries" for name, n in corpus.leaked.items())
    typer.echo(
        f"corpus: {corpus.rows} rows -> {corpus.train} documents to adapt on, {corpus.selection} to "
        f"select on"
        + (f" (left out: {', '.join(p for p in (left_out, leaked) if p)})" if left_out or leaked else "")
    )
    dropped = "; ".join(
        f"{split} " + ", ".join(f"{method} {n}" for method, n in lost.items())
        for split, lost in result.dropped.items()
        if lost
    )
    typer.echo(
        "pairs: "
        + ", ".join(f"{method} {n}" for method, n in result.pairs.items())
        + (f" (dropped for carrying an evaluation or selection text: {dropped})" if dropped else "")
    )
    if result.negatives:
        dropped_as = {
            "dropped_margin": "scored too near the positive",
            "dropped_same_document": "from the query's document",
        }
        why = ", ".join(
            f"{sum(c[key] for c in result.negatives.values())} {reason}" for key, reason in dropped_as.items()
        )
        typer.echo(
            "hard negatives: "
            + ", ".join(f"{method} {c['mined']}" for method, c in result.negatives.items())
            + f" (mined with the base model; candidates left out: {why})"
        )
    training = result.training
    typer.echo(f"steps: {training.steps}; base weight kept: {training.base_weight}")
    for line in training.score_lines():
        typer.echo(line)
    if training.export:
        typer.echo(f"exported: {training.export}")
