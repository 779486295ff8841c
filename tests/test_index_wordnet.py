"""The WordNet glosses searched with the packaged MiniLM: held-out example sentences find their synset's gloss."""

import json

import pytest

from neoembed.index import build_index, load_index
from neoembed.index.corpus import wordnet_documents


@pytest.fixture(scope="module")
def synsets():
    from neoembed.data.wordnet import load_synsets

    return load_synsets()


def _heldout_examples(synsets, count):
    from neoembed.data.wordnet import split_of

    chosen = [s for s in synsets if s.examples and split_of(s.id) == "heldout"]
    return chosen[:: max(1, len(chosen) // count)][:count]


def _hit_rate(index, queries, k=10):
    hits = index.search_batch([s.examples[0] for s in queries], k=k)
    return sum(s.id in {h.id for h in row} for s, row in zip(queries, hits)) / len(queries)


def test_heldout_example_finds_its_gloss_among_the_other_senses(synsets, tmp_path):
    """A subset corpus: 25 held-out synsets, every other sense of their lemmas, and 300 unrelated synsets."""
    queries = _heldout_examples(synsets, 25)
    lemmas = {lemma for s in queries for lemma in s.lemmas}
    keep = {s.id for s in synsets if lemmas & set(s.lemmas)} | {s.id for s in synsets[::400]}
    docs = list(wordnet_documents([s for s in synsets if s.id in keep]))
    assert len(docs) > 400 and all(s.examples[0] not in d.text for s in queries for d in docs)
    path = tmp_path / "wordnet.jsonl"
    path.write_text("".join(json.dumps({"id": d.id, "text": d.text, **d.metadata}) + "\n" for d in docs))
    build_index([path], tmp_path / "index", threads=2, tune_queries=100)
    index = load_index(tmp_path / "index")
    # Lemma overlap makes senses hard to tell apart; MiniLM still ranks the right one in the top 10 mostly.
    rate = _hit_rate(index, queries)
    print(f"held-out example -> gloss hit@10: {rate:.2f} over {len(queries)} queries, {len(docs)} documents")
    assert rate >= 0.7
    example = queries[0]
    assert example.id in {h.id for h in index.search(example.examples[0], k=10)}


@pytest.mark.slow
def test_full_wordnet_corpus_built_from_the_wordnet_source(synsets, tmp_path):
    manifest = build_index(["wordnet"], tmp_path / "index", threads=2)
    assert manifest.ntotal == len(synsets) and manifest.tuning.recall_at_10 >= 0.95
    assert _hit_rate(load_index(tmp_path / "index"), _heldout_examples(synsets, 200)) >= 0.5
