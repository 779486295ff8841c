"""The held-out retrieval set scored during training, as sentence-transformers' InformationRetrievalEvaluator."""

from __future__ import annotations

import re

from sentence_transformers.sentence_transformer.evaluation import (
    InformationRetrievalEvaluator,
    SequentialEvaluator,
)

from neoembed.contrastive.settings import EvalSettings
from neoembed.evaluation.local_tasks import wordnet_example_retrieval

NAME = "heldout"
RECALL_AT = [1, 10, 100]


def records_retrieval(path: str, source: str, n_queries: int, n_corpus: int) -> tuple[dict, dict, dict]:
    """Held-out records: each query -> its positive, among the positives of the first `n_corpus` rows."""
    from neoembed.contrastive.data import ContrastiveDataError
    from neoembed.data.records import RecordsError, load_records

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


def evaluated_source(settings: EvalSettings) -> str:
    """The source whose prompts the held-out texts get (the WordNet build's source is `wordnet`)."""
    return settings.source if settings.kind == "records" else "wordnet"


def build_evaluator(
    settings: EvalSettings, prompts: tuple[str, str] = ("", ""), dims: list[int] = ()
) -> InformationRetrievalEvaluator | SequentialEvaluator | None:
    """The held-out set, its queries and documents prefixed with `prompts` (query, document) as in training;
    with `dims` (Matryoshka), also scored on embeddings truncated to each of them (named heldout_dim<d>)."""
    if settings.kind == "none":
        return None
    if settings.kind == "wordnet":
        queries, corpus, relevant = wordnet_example_retrieval(settings.queries, settings.corpus)
    else:
        queries, corpus, relevant = records_retrieval(
            settings.path, settings.source, settings.queries, settings.corpus
        )

    def evaluator(truncate_dim: int | None) -> InformationRetrievalEvaluator:
        return InformationRetrievalEvaluator(
            queries,
            corpus,
            relevant,
            name=f"{NAME}_dim{truncate_dim}" if truncate_dim else NAME,
            ndcg_at_k=[10],
            precision_recall_at_k=RECALL_AT,
            accuracy_at_k=[1, 10],
            mrr_at_k=[10],
            map_at_k=[100],
            batch_size=settings.batch_size,
            show_progress_bar=False,
            query_prompt=prompts[0] or None,
            corpus_prompt=prompts[1] or None,
            truncate_dim=truncate_dim,
        )

    if not dims:
        return evaluator(None)
    # The full-dimension evaluator decides (best-checkpoint choice), the others only report.
    return SequentialEvaluator([evaluator(None), *map(evaluator, dims)], main_score_function=lambda s: s[0])


def headline(metrics: dict) -> dict:
    """nDCG@10 and recall@k from an evaluator's metrics (keys with or without the eval_ prefix), plus
    `ndcg@10_dim<d>` for each truncated dimension scored."""
    wanted = ["ndcg@10"] + [f"recall@{k}" for k in RECALL_AT]
    out = {}
    for key, value in metrics.items():
        for name in wanted:
            if key.endswith(f"{NAME}_cosine_{name}"):
                out[name] = round(float(value), 4)
        if match := re.search(rf"{NAME}_dim(\d+)_cosine_ndcg@10$", key):
            out[f"ndcg@10_dim{match[1]}"] = round(float(value), 4)
    return out
