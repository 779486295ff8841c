"""`neoembed adapt`: a bare corpus -> pairs (`adapt.pairs`) -> the contrastive trainer -> an adapted embedder.

The run directory (`train.output_dir`) holds:
  pairs/      the training pairs, a build `data.load_records` reads (one source per method), with the hard
              negatives mined for them when pairs.negatives asks
  selection/  pairs of the held-out documents: the selection split export.base_weight auto chooses on
  train/      the contrastive run: checkpoints, metrics.jsonl, recipe, summary.json
  model/      the adapted sentence-transformers directory (unless export.path says elsewhere)
  adapt.json  what the corpus gave: rows read, documents kept and left out (and why), pairs per method, the
              pairs dropped for carrying an evaluation or selection text (training and selection alike), what
              the miner counted when negatives were mined, and the selection sets (a general set holding
              documents of the corpus is left out of them, counted)
Every check that can refuse (the base model, the recipe's selection sets against the evaluation texts) runs
before any pair is made; pair-making itself drops what the trainer's checks would refuse, and counts it. What
the corpus gave is announced before training starts.
Re-running the same command resumes: the pairs are kept when made from the same corpus file and settings
(anything else is an error, not a silent rebuild over a run that trained on the old ones), and training
resumes from its newest complete checkpoint.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from neoembed.adapt.clusters import cluster_count, cluster_sources, document_clusters
from neoembed.adapt.corpus import CorpusCounts, CorpusError
from neoembed.adapt.negatives import mine_negatives
from neoembed.adapt.pairs import Sourced, sourced_pairs, unsourced, write_pairs
from neoembed.adapt.settings import AdaptSettings
from neoembed.contrastive import (
    ContrastiveResult,
    ContrastiveSettings,
    ContrastiveTrain,
    DataSettings,
    HeldOutSet,
    check_trainable,
    evaluated_texts,
    refuse_shared,
    retrieval_set,
    run_contrastive,
    split_sources,
)
from neoembed.data import LeakGuard, text_key
from neoembed.recipes import RecipeError
from neoembed.run_files import write_json
from neoembed.training import run_lock

PAIRS, SELECTION, TRAIN, MODEL, REPORT = "pairs", "selection", "train", "model", "adapt.json"
MIN_SELECTION = 20  # pairs a method's selection set needs to rank anything worth choosing on


@dataclass(frozen=True)
class Prepared:
    """What the corpus gave, before training: `adapt.json`, and the command's first lines."""

    corpus: CorpusCounts
    pairs: dict[str, int]  # method -> training pairs made
    dropped: dict[str, dict[str, int]]  # "pairs" | "selection" -> method -> pairs carrying a guarded text
    negatives: dict[str, dict[str, int]]  # method -> the miner's counts (empty: no negatives mined)
    selection: dict[str, int]  # method -> pairs of the held-out documents (the in-domain selection sets)
    general: list[str]  # the general selection sets kept
    general_left_out: dict[str, int]  # general selection set -> its texts that are documents of the corpus
    clusters: dict[str, int]  # method -> the topic clusters its batches are drawn from (empty: unclustered)

    @property
    def selects(self) -> bool:
        """Whether anything is left to choose the WiSE-FT weight on."""
        return bool(self.selection or self.general)

    def report(self) -> dict[str, Any]:
        report = {
            "corpus": asdict(self.corpus),
            "pairs": self.pairs,
            "dropped": self.dropped,
            "selection": {"in_domain": self.selection, "general": self.general},
        }
        if self.negatives:
            report["negatives"] = self.negatives
        if self.general_left_out:
            report["general_left_out"] = self.general_left_out
        if self.clusters:
            report["clusters"] = self.clusters
        return report


@dataclass(frozen=True)
class AdaptResult:
    prepared: Prepared
    training: ContrastiveResult


@dataclass(frozen=True)
class Made:
    """A pair set as its maker leaves it, before `write_pairs` writes it."""

    pairs: dict[str, list[Sourced]]
    leaked: dict[str, int]  # documents left out as evaluation queries
    dropped: dict[str, int]  # method -> pairs dropped for carrying a guarded text
    negatives: dict[str, list[list[str]]] = field(default_factory=dict)  # method -> each pair's negatives
    mined: dict[str, dict[str, int]] = field(default_factory=dict)  # method -> the miner's counts
    clusters: np.ndarray | None = None  # each document's topic cluster (`adapt.clusters`); None: unclustered


def pair_config(settings: AdaptSettings, guard: LeakGuard) -> dict[str, Any]:
    """What the pairs are made from: a change in any of it makes other pairs. The guard's digest is part of
    it: pairs made under other guarded queries (another eval_texts file's content, or before pairs were
    guarded at all) may carry a query the run must not train on."""
    corpus = Path(settings.corpus.path).resolve()
    stat = corpus.stat()
    # Pairs made without negatives or clusters keep the digest they had before either existed (runs resume).
    unmined = () if settings.pairs.negatives else ("negatives", "negative_margin")
    unclustered = () if clustered(settings) else ("clusters",)
    uses_base = settings.pairs.negatives or clustered(settings)
    return {
        "corpus": {"file": str(corpus), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns},
        "corpus_settings": settings.corpus.model_dump(mode="json"),
        "pairs": settings.pairs.model_dump(mode="json", exclude={"prompts", "alpha", *unmined, *unclustered}),
        **({"miner": settings.model.base} if uses_base else {}),
        "rows": training_rows(settings),
        "seed": settings.train.seed,
        "guard": guard.digest,
    }


def training_rows(settings: AdaptSettings) -> int:
    """Pairs per method: what the run's steps draw, methods sampled alike (no pair is made to go unused)."""
    train = settings.train
    drawn = -(-train.max_steps * train.batch_size * train.grad_accum // len(settings.pairs.methods))
    return max(drawn, train.batch_size)


def clusters_asked(settings: AdaptSettings) -> int:
    """How many topic clusters the training batches are drawn from (1: none)."""
    return cluster_count(settings.pairs.clusters, training_rows(settings), settings.train.batch_size)


def clustered(settings: AdaptSettings) -> bool:
    return clusters_asked(settings) > 1


@dataclass(frozen=True)
class PairCounts:
    """A written pair set's counts per method (`adapt.json`)."""

    pairs: dict[str, int]  # pairs made
    dropped: dict[str, int]  # pairs dropped for carrying a guarded text
    mined: dict[str, dict[str, int]]  # the miner's counts, when negatives were mined
    sources: dict[str, str]  # the training sources written -> the method of each


def ensure_pairs(out: Path, config: dict[str, Any], make: Callable[[], Made], batch_size: int) -> PairCounts:
    """The counts of the pairs in `out`, made by `make()` and written unless a finished set from the same
    `config` is there: a source per method, or per method and cluster where `make` clustered the documents
    (clusters too small to fill `batch_size` twice pooled, `adapt.clusters`)."""
    stats_file = out / "stats.json"
    if stats_file.exists():
        stats = json.loads(stats_file.read_text(encoding="utf-8"))
        if stats["config"].get("made_from") != config:
            raise RecipeError(
                f"{out} holds pairs made from another corpus or other settings; use another train.output_dir",
                param="train.output_dir",
            )
        total = stats["total"]
        methods = {source: written.get("method", source) for source, written in stats["sources"].items()}
        counts = dict.fromkeys(methods.values(), 0)
        for source, written in stats["sources"].items():
            counts[methods[source]] += written["rows_out"]
        dropped, mined = total["pairs_dropped_for_guarded_text"], total.get("negatives_mined", {})
        return PairCounts(counts, dropped, mined, methods)
    made = make()
    pairs = unsourced(made.pairs)
    sources = {method: (method, list(range(len(rows)))) for method, rows in pairs.items()}
    if made.clusters is not None:
        documents = {method: [document for document, _ in rows] for method, rows in made.pairs.items()}
        sources = cluster_sources(documents, made.clusters, batch_size)
    write_pairs(
        out,
        {source: [pairs[method][i] for i in rows] for source, (method, rows) in sources.items()},
        config={"made_from": config},
        leaked=made.leaked,
        dropped=made.dropped,
        negatives={
            source: [made.negatives[method][i] for i in rows]
            for source, (method, rows) in sources.items()
            if method in made.negatives
        },
        mined=made.mined,
        methods=(methods := {source: method for source, (method, _) in sources.items()}),
    )
    return PairCounts(
        {method: len(rows) for method, rows in pairs.items()}, made.dropped, made.mined, methods
    )


def enough(pairs: dict[str, list], least: int) -> dict[str, list]:
    """The methods that made at least `least` pairs (a training source must fill a batch of distinct rows; a
    selection set must rank something)."""
    return {method: rows for method, rows in pairs.items() if len(rows) >= least}


def without_texts(
    pairs: dict[str, list[Sourced]], keys: frozenset[int]
) -> tuple[dict[str, list[Sourced]], dict[str, int]]:
    """`pairs` less those with a query or positive whose text key is in `keys`, and how many each method lost
    (only methods that lost some)."""
    kept = {
        method: [(document, pair) for document, pair in rows if keys.isdisjoint(map(text_key, pair))]
        for method, rows in pairs.items()
    }
    lost = {method: len(pairs[method]) - len(rows) for method, rows in kept.items()}
    return kept, {method: n for method, n in lost.items() if n}


@dataclass(frozen=True)
class GeneralSets:
    """export.selection.general's sets as this corpus leaves them: general text is text the run neither trains
    on nor is evaluated on, so a set sharing a text with the documents (a user adapting on the manual pages)
    is left out of the selection rather than costing the user's pairs."""

    kept: list[HeldOutSet]
    keys: frozenset[int]  # the text keys of the kept sets, which no training pair may carry
    left_out: dict[str, int]  # set label -> how many of its texts are documents of the corpus


def general_sets(
    settings: AdaptSettings, evaluated: frozenset[int]
) -> dict[str, tuple[HeldOutSet, set[int]]]:
    """export.selection.general's sets by label, with their text keys. A set that holds evaluation texts is
    refused here, before any pair is made, as the trainer would refuse it after."""
    sets = {}
    for spec in settings.export.selection.general:
        queries, corpus, _ = retrieval_set(spec)
        texts = [*queries.values(), *corpus.values()]
        refuse_shared(spec, texts, evaluated, "evaluation texts")
        sets[spec.label] = (spec, set(map(text_key, texts)))
    return sets


def outside(sets: dict[str, tuple[HeldOutSet, set[int]]], documents: list[str]) -> GeneralSets:
    """`sets` less those sharing a text with `documents`."""
    keys = set(map(text_key, documents))
    shared = {label: len(set_keys & keys) for label, (_, set_keys) in sets.items()}
    kept = [label for label, count in shared.items() if not count]
    return GeneralSets(
        [sets[label][0] for label in kept],
        frozenset().union(*(sets[label][1] for label in kept)),
        {label: count for label, count in shared.items() if count},
    )


def training_texts(pairs_dir: Path) -> frozenset[int]:
    """The text keys of every query and positive of the pairs in `pairs_dir`."""
    from neoembed.data import load_records

    return frozenset(
        text_key(text)
        for records in load_records(pairs_dir).values()
        for column in ("query", "positive")
        for text in records[column]
    )


def contrastive_settings(
    settings: AdaptSettings,
    out: Path,
    sources: dict[str, str],
    selected: list[str],
    general: list[HeldOutSet],
) -> ContrastiveSettings:
    """The contrastive run that adapts: the pairs as its data (`sources`: each training source's method, whose
    prompts it gets), the held-out documents' pairs of the `selected` methods as the in-domain half of the
    selection split its WiSE-FT weight is chosen on, the `general` sets the other half, the export in
    <out>/model."""
    export = settings.export
    held_out = [
        HeldOutSet(kind="records", path=str(out / SELECTION), source=method, name=f"selection-{method}")
        for method in selected
    ]
    selection = export.selection.model_copy(
        update={"in_domain": 0, "in_domain_sets": held_out, "general": general}
    )
    return ContrastiveSettings(
        data=DataSettings(
            path=str(out / PAIRS),
            alpha=settings.pairs.alpha,
            max_negatives=settings.pairs.negatives,
            prompts=split_sources(settings.pairs.prompts, sources),
        ),
        model=settings.model,
        loss=settings.loss,
        optim=settings.optim,
        train=ContrastiveTrain(**{**settings.train.model_dump(), "output_dir": str(out / TRAIN)}),
        eval=settings.eval,
        export=export.model_copy(update={"path": export.path or str(out / MODEL), "selection": selection}),
    )


def run_adapt(settings: AdaptSettings, announce: Callable[[Prepared], None] = lambda _: None) -> AdaptResult:
    """Adapt `model.base` to the corpus per `settings`; see the module's docstring for what is written.
    `announce` gets what the corpus gave once the pairs are made, before training."""
    out = Path(settings.train.output_dir)
    check_trainable(settings.model.base)  # before any work
    # The texts the selection split may not hold: every evaluated set's queries and documents.
    evaluated = evaluated_texts(settings.eval.sets)
    recipe_general = general_sets(settings, evaluated)
    with run_lock(out):
        corpus = settings.corpus.read(evaluated)
        general = outside(recipe_general, [*corpus.train, *corpus.selection])
        config, pairs = pair_config(settings, corpus.guard), settings.pairs
        options: dict[str, Any] = {
            "seed": settings.train.seed,
            "crop_ratio": pairs.crop_ratio,
            "term_words": pairs.term_words,
        }
        batch = settings.train.batch_size

        def training_pairs() -> Made:
            made = sourced_pairs(corpus.train, pairs.methods, rows=training_rows(settings), **options)
            # No evaluation query may be trained on, and the general selection sets must be text the run does
            # not train on (the selection refuses them).
            made, dropped = without_texts(made, corpus.guard.keys | general.keys)
            if not (usable := enough(made, batch)):
                counts = ", ".join(f"{method} {len(rows)}" for method, rows in made.items())
                raise CorpusError(
                    f"{settings.corpus.path}: no pair method made a batch of {batch} pairs ({counts}); the "
                    "documents are too few or too short for these methods",
                    param="corpus.path",
                )
            negatives: dict[str, list[list[str]]] = {}
            mined: dict[str, dict[str, int]] = {}
            if pairs.negatives:
                negatives, mined = mine_negatives(
                    usable,
                    teacher=settings.model.base,
                    count=pairs.negatives,
                    margin=pairs.negative_margin,
                    workdir=out,
                )
            clusters = None
            if clustered(settings):
                clusters = document_clusters(
                    corpus.train,
                    settings.model.base,
                    clusters_asked(settings),
                    seed=settings.train.seed,
                    max_length=settings.model.max_length,
                )
            return Made(usable, corpus.counts.leaked, dropped, negatives, mined, clusters)

        made = ensure_pairs(out / PAIRS, config, training_pairs, batch)

        def selection_pairs() -> Made:
            held = sourced_pairs(corpus.selection, list(made.pairs), **options)
            # A short query can recur across documents, and a document's first sentence or span can be an
            # evaluation's text (a definition a dictionary copies): a pair sharing a text with training or with
            # any evaluated set would be choosing on text the selection split refuses.
            held, lost = without_texts(held, corpus.guard.keys | evaluated | training_texts(out / PAIRS))
            return Made(enough(held, MIN_SELECTION), {}, lost)

        selection = ensure_pairs(out / SELECTION, config, selection_pairs, batch)
        prepared = Prepared(
            corpus.counts,
            made.pairs,
            {"pairs": made.dropped, "selection": selection.dropped},
            made.mined,
            selection.pairs,
            [spec.label for spec in general.kept],
            general.left_out,
            dict(Counter(made.sources.values())) if clustered(settings) else {},
        )
        write_json(out / REPORT, prepared.report())
    announce(prepared)
    contrastive = contrastive_settings(settings, out, made.sources, list(selection.pairs), general.kept)
    if not prepared.selects and settings.export.base_weight == "auto":
        # Too few held-out pairs and every general set among the documents: the adapted weights are exported
        # as trained (the selection line says so).
        contrastive = contrastive.model_copy(
            update={"export": contrastive.export.model_copy(update={"base_weight": 0.0})}
        )
    return AdaptResult(prepared, run_contrastive(contrastive))
