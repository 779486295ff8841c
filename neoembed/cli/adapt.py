"""`neoembed adapt --model M --corpus F --out D [--recipe R] [--section.field value ...]`: domain adaptation
on a bare corpus."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from neoembed.adapt import AdaptSettings
from neoembed.cli.options import Flag, recipe_options

if TYPE_CHECKING:  # run.py loads datasets, which `--help` must not need (tests/test_optional_imports.py)
    from neoembed.adapt import Prepared


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

    result = run_adapt(settings, announce=lambda prepared: typer.echo("\n".join(prepared_lines(prepared))))
    training = result.training
    exported = training.exported_step
    at = f"; exported step {exported}'s weights" if exported not in (None, training.steps) else ""
    typer.echo(f"steps: {training.steps}{at}; base weight kept: {training.base_weight}")
    for line in training.score_lines():
        typer.echo(line)
    if training.export:
        typer.echo(f"exported: {training.export}")


def prepared_lines(prepared: Prepared) -> list[str]:
    """What the corpus gave, said before training: documents, pairs, mined negatives, the selection split."""
    corpus = prepared.corpus
    reasons = {"empty": corpus.empty, "short": corpus.short, "duplicates": corpus.duplicates}
    left_out = ", ".join(f"{n} {reason}" for reason, n in reasons.items() if n)
    leaked = ", ".join(f"{n} {name} evaluation queries" for name, n in corpus.leaked.items())
    lines = [
        f"corpus: {corpus.rows} rows -> {corpus.train} documents to adapt on, {corpus.selection} to select on"
        + (f" (left out: {', '.join(p for p in (left_out, leaked) if p)})" if left_out or leaked else "")
    ]
    dropped = "; ".join(
        f"{split} " + ", ".join(f"{method} {n}" for method, n in lost.items())
        for split, lost in prepared.dropped.items()
        if lost
    )
    lines.append(
        "pairs: "
        + ", ".join(f"{method} {n}" for method, n in prepared.pairs.items())
        + (f" (dropped for carrying an evaluation or selection text: {dropped})" if dropped else "")
    )
    if prepared.negatives:
        dropped_as = {
            "dropped_margin": "scored too near the positive",
            "dropped_same_document": "from the query's document",
        }
        why = ", ".join(
            f"{sum(c[key] for c in prepared.negatives.values())} {reason}"
            for key, reason in dropped_as.items()
        )
        lines.append(
            "hard negatives: "
            + ", ".join(f"{method} {c['mined']}" for method, c in prepared.negatives.items())
            + f" (mined with the base model; candidates left out: {why})"
        )
    if prepared.clusters:
        lines.append(
            "batches: each from one topic cluster of the documents (k-means on the base model), "
            + ", ".join(f"{method} {n}" for method, n in prepared.clusters.items())
            + " clusters (pairs.clusters)"
        )
    held = ", ".join(f"{method} {n}" for method, n in prepared.selection.items()) or "none"
    general = ", ".join(prepared.general) or "none"
    shadowed = "; ".join(
        f"{label} left out, {n} of its texts are documents of the corpus"
        for label, n in prepared.general_left_out.items()
    )
    lines.append(
        f"selection: held-out pairs {held}; general text {general}"
        + (f" ({shadowed})" if shadowed else "")
        + ("" if prepared.selects else "; nothing to choose the base weight on, the adapted weights are kept")
    )
    return lines
