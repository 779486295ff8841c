"""`export.base_weight: auto`: the base model's share of the exported weights (WiSE-FT), chosen on data.

Fine-tuning on one kind of text gains on it and can lose elsewhere, and the share of the base that undoes the
loss depends on the build (docs/contrastive.md). So each run scores a few mixing weights on a selection split
and keeps the best; with `export.checkpoints: all` it does so for every checkpoint kept too, so a schedule
that trained past its best is cut back to an earlier step (the early stopping of WiSE-FT's fine-tuning, on
the same split). The split mixes two kinds of retrieval set, counted half each:
- in-domain: `export.selection.in_domain` rows of each training source, held out of training (the rows with
  the smallest query keys: a fixed pseudo-random choice; rows sharing any text with them leave training too),
  and the sets of `export.selection.in_domain_sets`, held out by whoever made the data (`neoembed adapt`: the
  pairs of documents it never trains on);
- general: sets of text the run neither trains on nor is evaluated on (`export.selection.general`, Debian's
  manual pages by default), so that the weight kept is one that does not forget.
A set given by the recipe sharing a text with the training data or with an evaluation set is refused, with
the count: choosing on evaluation data would report a tuned score as a held-out one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from datasets import Dataset

from neoembed.contrastive.data import text_keys
from neoembed.contrastive.evaluation import prompt_source, retrieval_evaluator, retrieval_set
from neoembed.contrastive.settings import ContrastiveSettings, HeldOutSet
from neoembed.contrastive.weight_ensemble import WeightMix
from neoembed.data import text_key
from neoembed.recipes import RecipeError

Retrieval = tuple[dict, dict, dict]  # queries, corpus, relevant
# Evaluation sets whose texts a selection set may never share, besides the run's own eval.sets: the held-out
# sets every neoembed evaluation (quickstart, bench, mteb-eval's local tasks) scores.
ALWAYS_EVALUATED = (HeldOutSet(kind="wordnet"), HeldOutSet(kind="foldoc"))
# Candidates in a row scoring below the best so far that end the scan: a WiSE-FT curve over the base's share
# rises to one peak and falls (every curve recorded in docs/benchmarks does), so the rest cannot win.
PATIENCE = 2


@dataclass(frozen=True)
class SelectionSet:
    retrieval: Retrieval
    prompt_source: str | None  # whose prompts its texts get (`evaluation.prompt_source`)


@dataclass
class SelectionSplit:
    in_domain: dict[str, SelectionSet] = field(default_factory=dict)  # training source -> its held-out rows
    general: dict[str, SelectionSet] = field(default_factory=dict)  # set label -> its texts


@dataclass(frozen=True)
class Choice:
    base_weight: float
    curve: list[dict]  # per candidate: step, base_weight, score, in_domain, general, each set's nDCG@10
    step: int  # the training step of the weights mixed (a checkpoint's, or those training ended with)


# The weights a choice may mix with the base: a training step, and how to read that checkpoint's weights
# (`model.state_dict()` names), None for the weights the model holds now.
Tuned = tuple[int, Callable[[], dict] | None]


def hold_out_in_domain(sources: dict[str, Dataset], rows: int) -> tuple[dict[str, Dataset], SelectionSplit]:
    """`rows` rows of each source as a retrieval set (query -> positive among the chosen positives), and the
    sources without every row that shares a text with them."""
    split, kept = SelectionSplit(), {}
    for name, dataset in sources.items():
        keys = text_keys(dataset)  # (rows, texts): query, positive, negatives
        chosen = np.argsort(keys[:, 0], kind="stable")[: min(rows, len(dataset) // 2)]
        touching = np.isin(keys, keys[chosen, :2]).any(axis=1)
        kept[name] = dataset.select(np.flatnonzero(~touching))
        picked = dataset.select(chosen)
        corpus = {f"d{i}": text for i, text in enumerate(dict.fromkeys(picked["positive"]))}
        ids = {text: i for i, text in corpus.items()}
        queries = {f"q{i}": query for i, query in enumerate(picked["query"])}
        relevant = {f"q{i}": {ids[positive]} for i, positive in enumerate(picked["positive"])}
        split.in_domain[name] = SelectionSet((queries, corpus, relevant), name)
    return kept, split


def _texts(retrieval: Retrieval) -> list[str]:
    queries, corpus, _ = retrieval
    return [*queries.values(), *corpus.values()]


def _shared(texts: list[str], keys: Collection[int]) -> int:
    return sum(text_key(text) in keys for text in texts)


def evaluated_texts(eval_sets: Sequence[HeldOutSet]) -> frozenset[int]:
    """The text keys of every query and document of `eval_sets` and of the sets every run is scored on
    (ALWAYS_EVALUATED): text a selection set may never hold."""
    return frozenset(
        text_key(text) for spec in [*eval_sets, *ALWAYS_EVALUATED] for text in _texts(retrieval_set(spec))
    )


def refuse_shared(
    spec: HeldOutSet, texts: list[str], keys: Collection[int], what: str, field: str = "general"
) -> None:
    """A selection set (of export.selection.`field`) holding any of `keys` (training or evaluation texts) is
    refused, named."""
    if shared := _shared(texts, keys):
        raise RecipeError(
            f"export.selection.{field} {spec.label}: {shared} of its {len(texts)} texts are also "
            f"{what}; select on text the run neither trains on nor is evaluated on",
            param=f"export.selection.{field}",
        )


def selection_split(settings: ContrastiveSettings, sources: dict[str, Dataset]):
    """The training sources less the in-domain selection rows, and the whole selection split, checked."""
    selection = settings.export.selection
    sources, split = (
        hold_out_in_domain(sources, selection.in_domain)
        if selection.in_domain
        else (sources, SelectionSplit())
    )
    training = set(np.concatenate([text_keys(d).ravel() for d in sources.values()]).tolist())
    evaluated = evaluated_texts(settings.eval.sets)
    groups = (
        ("in_domain_sets", split.in_domain, selection.in_domain_sets),
        ("general", split.general, selection.general),
    )
    for setting, group, specs in groups:
        for spec in specs:
            texts = _texts(found := retrieval_set(spec))
            refuse_shared(spec, texts, training, "training texts", setting)
            refuse_shared(spec, texts, evaluated, "evaluation texts", setting)
            group[spec.label] = SelectionSet(found, prompt_source(spec))
    for name, chosen in split.in_domain.items():
        if shared := _shared(_texts(chosen.retrieval), evaluated):
            raise RecipeError(
                f"export.selection.in_domain: {shared} texts of source {name}'s selection rows are evaluation "
                "texts; rebuild the data with the leakage guard",
                param="export.selection.in_domain",
            )
    return sources, split


def choose_export(
    mix: WeightMix,
    split: SelectionSplit,
    candidates: list[float],
    tuned: Sequence[Tuned],
    source_prompts: Mapping,
    batch_size: int,
    log: Callable[[dict], None],
) -> Choice:
    """Score the candidate base weights on the split (nDCG@10; in-domain and general sets half each) for each
    of the `tuned` weights in turn, smallest base weight first, until PATIENCE in a row score below that
    checkpoint's best; keep the best (checkpoint, weight), among equals the first scored. `log` gets each
    candidate's line. The model is left at the chosen checkpoint's weights mixed at the last weight scored:
    apply the choice's weight."""
    weights = sorted(set(candidates))
    if not weights:
        raise RecipeError("export.base_weights is empty: base_weight auto needs a candidate to choose")
    evaluators = {
        name: retrieval_evaluator(f"select_{name}", s.retrieval, source_prompts, s.prompt_source, batch_size)
        for name, s in {**split.in_domain, **split.general}.items()
    }
    curve: list[dict] = []
    best, best_weights = None, mix.tuned
    for step, load in tuned:
        if load is not None:
            mix.retune(load())
        for point in _weight_scan(mix, split, evaluators, weights, step):
            curve.append(point)
            log(point)
            if best is None or round(point["score"], 6) > round(best["score"], 6):
                best, best_weights = point, mix.tuned
    assert best is not None  # every scan scores at least one weight
    mix.tuned = best_weights
    return Choice(best["base_weight"], curve, best["step"])


def _weight_scan(mix: WeightMix, split: SelectionSplit, evaluators: dict, weights: list[float], step: int):
    """The points of one checkpoint's scan over the base weights, ending PATIENCE past its best."""
    best, behind = -1.0, 0
    for weight in weights:
        mix.apply(weight)
        scores = {
            name: float(e(mix.model)[f"select_{name}_cosine_ndcg@10"]) for name, e in evaluators.items()
        }
        groups = {
            "in_domain": [scores[name] for name in split.in_domain],
            "general": [scores[label] for label in split.general],
        }
        means = {group: float(np.mean(values)) for group, values in groups.items() if values}
        point = {"step": step, "base_weight": weight, "score": float(np.mean(list(means.values()))), **means}
        yield point | {f"ndcg@10 {name}": score for name, score in scores.items()}
        if round(point["score"], 6) > round(best, 6):
            best, behind = point["score"], 0
        elif (behind := behind + 1) == PATIENCE:
            return
