"""The held-out retrieval sets scored during training, as sentence-transformers' InformationRetrievalEvaluators.

One evaluator per set (`eval.sets`) and per smaller Matryoshka dimension, run in sequence as one
SequentialEvaluator; the first set's full-dimension nDCG@10 is the run's evaluation score. Each set's metrics
are named after it: `<set>_cosine_ndcg@10`, `<set>_dim<d>_cosine_ndcg@10` (`eval_`-prefixed in metrics.jsonl).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sentence_transformers.sentence_transformer.evaluation import (
    InformationRetrievalEvaluator,
    SequentialEvaluator,
)

from neoembed.contrastive import prompts
from neoembed.contrastive.settings import EvalSettings, HeldOutSet, PromptSettings
from neoembed.data import (
    foldoc_retrieval,
    jargon_retrieval,
    manpages_retrieval,
    packages_retrieval,
    read_test_set,
)
from neoembed.evaluation import wordnet_example_retrieval

RECALL_AT = [1, 10, 100]
HEADLINE = ["ndcg@10"] + [f"recall@{k}" for k in RECALL_AT]


def records_retrieval(
    path: str, source: str, n_queries: int = 500, n_corpus: int = 2000
) -> tuple[dict, dict, dict]:
    """Held-out records: each query -> its positive, among the positives of the first `n_corpus` rows."""
    from neoembed.contrastive.data import ContrastiveDataError
    from neoembed.data import RecordsError, load_records

    try:
        table = load_records(path, [source])[source]
    except RecordsError as err:
        raise ContrastiveDataError(f"eval: {err}") from err
    rows = table.select(range(min(n_corpus, len(table))))
    corpus = dict.fromkeys(rows["positive"])  # a document once, even if several queries share it
    ids = {text: f"d{i}" for i, text in enumerate(corpus)}
    queries, relevant = {}, {}
    for i, (query, positive) in enumerate(zip(rows["query"][:n_queries], rows["positive"], strict=False)):
        queries[f"q{i}"] = query
        relevant[f"q{i}"] = {ids[positive]}
    return queries, {i: t for t, i in ids.items()}, relevant


def retrieval_set(spec: HeldOutSet) -> tuple[dict, dict, dict]:
    """(queries, corpus, relevant) of a held-out set, at its own size unless the recipe gives one."""
    sizes = {k: v for k, v in (("n_queries", spec.queries), ("n_corpus", spec.corpus)) if v is not None}
    if spec.kind == "wordnet":
        return wordnet_example_retrieval(**sizes)
    if spec.kind == "foldoc":
        return foldoc_retrieval(**sizes)
    if spec.kind == "manpages":
        return manpages_retrieval(**sizes)
    if spec.kind == "packages":
        return packages_retrieval(**sizes)
    if spec.kind == "jargon":
        return jargon_retrieval(**sizes)
    if spec.kind == "files":
        assert spec.path is not None  # the validator requires a files set's path
        return read_test_set(spec.path, spec.columns, option="eval.sets columns").as_tuple()
    assert spec.path is not None and spec.source is not None  # the validator requires both for records
    return records_retrieval(spec.path, spec.source, **sizes)


def prompt_source(spec: HeldOutSet) -> str | None:
    """The source whose prompts a set's texts get: the WordNet build's source is `wordnet`; FOLDOC and the
    Jargon File are no training source, nor is your test set, so they get the default pair (the export's `query` / `document`
    prompts); a records set gets its `source`'s, and every other kind is read from the training source of its
    name."""
    if spec.kind in ("foldoc", "jargon", "files"):
        return None
    return spec.source if spec.kind == "records" else spec.kind


def metric_prefix(spec: HeldOutSet, dim: int | None = None) -> str:
    return f"{spec.label}_dim{dim}" if dim else spec.label


def build_evaluator(
    settings: EvalSettings,
    source_prompts: Mapping[str, PromptSettings] | None = None,
    dims: Sequence[int] = (),
) -> SequentialEvaluator | None:
    """Every held-out set, its queries and documents prefixed with the prompts training gives its source;
    with `dims` (Matryoshka), each also scored on embeddings truncated to each of them. None without sets."""
    if not settings.sets:
        return None
    evaluators = []
    for spec in settings.sets:
        found, source = retrieval_set(spec), prompt_source(spec)
        for dim in [None, *dims]:
            name = metric_prefix(spec, dim)
            evaluators.append(
                retrieval_evaluator(name, found, source_prompts, source, settings.batch_size, dim)
            )
    # The first set at full dimension decides (the run's evaluation score); the others report.
    return SequentialEvaluator(evaluators, main_score_function=lambda scores: scores[0])


def retrieval_evaluator(
    name: str,
    retrieval: tuple[dict, dict, dict],
    source_prompts: Mapping[str, PromptSettings] | None,
    source: str | None,
    batch_size: int,
    dim: int | None = None,
) -> InformationRetrievalEvaluator:
    """One (queries, corpus, relevant) set as an evaluator named `name`, with the prompts of `source`."""
    queries, corpus, relevant = retrieval
    query_prompt, corpus_prompt = prompts.resolve(source_prompts or {}, source)
    return InformationRetrievalEvaluator(
        queries,
        corpus,
        relevant,
        name=name,
        ndcg_at_k=[10],
        precision_recall_at_k=RECALL_AT,
        accuracy_at_k=[1, 10],
        mrr_at_k=[10],
        map_at_k=[100],
        batch_size=batch_size,
        show_progress_bar=False,
        query_prompt=query_prompt or None,
        corpus_prompt=corpus_prompt or None,
        truncate_dim=dim,
    )


def describe_sets(settings: EvalSettings, evaluator: SequentialEvaluator | None) -> dict[str, str]:
    """{set: what it is and its size}, for the model card."""
    if evaluator is None:
        return {}
    sizes = {
        e.name: (len(e.queries), len(e.corpus))
        for e in evaluator.evaluators
        if isinstance(e, InformationRetrievalEvaluator)  # every one `build_evaluator` makes
    }
    what = {
        "wordnet": "a WordNet example sentence -> its synset's definition, among definitions of synsets every "
        "training build leaves out",
        "foldoc": "a computing term -> its FOLDOC definition: a source no training build reads (every build "
        "drops these texts), so a drop here says fine-tuning fit its training data rather than improving the "
        "model",
        "manpages": "a manual page's NAME summary -> its description (Debian's manpages and manpages-dev)",
        "packages": "a Debian package's synopsis -> its description (the archive's English descriptions)",
        "jargon": "a Jargon File term -> its definition: a source no training build reads",
    }
    out = {}
    for spec in settings.sets:
        queries, corpus = sizes[metric_prefix(spec)]
        if spec.kind == "files":
            kind = f"your test set `{spec.path}`"
        else:
            kind = (
                what.get(spec.kind)
                or f"query -> positive of the records in `{spec.path}`, source {spec.source}"
            )
        out[spec.label] = f"{kind} ({queries:,} queries, {corpus:,} documents)"
    return out


def set_scores(
    metrics: Mapping[str, float], settings: EvalSettings, dims: Sequence[int] = ()
) -> dict[str, dict[str, float]]:
    """{set: {nDCG@10, recall@k, and `ndcg@10_dim<d>` per smaller dimension}} from an evaluator's metrics
    (keys with or without the trainer's `eval_` prefix); a set the metrics do not hold is left out."""
    metrics = {key.removeprefix("eval_"): value for key, value in metrics.items()}
    out = {}
    for spec in settings.sets:
        wanted = {name: f"{metric_prefix(spec)}_cosine_{name}" for name in HEADLINE}
        wanted |= {f"ndcg@10_dim{d}": f"{metric_prefix(spec, d)}_cosine_ndcg@10" for d in dims}
        found = {name: round(float(metrics[key]), 4) for name, key in wanted.items() if key in metrics}
        if found:
            out[spec.label] = found
    return out
