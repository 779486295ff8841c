"""FOLDOC, the cross-source held-out set: parsed from Debian's dict-foldoc (installed into the cache if absent)."""

import hashlib
import json

from neoembed.data.foldoc import clean_definition, foldoc_retrieval, heldout_texts, load_entries


def test_definition_is_the_first_paragraph_as_plain_text():
    body = (
        "   <language> (StarLISP) A {data-parallel} extension of {Common LISP\n"
        "   (https://example.org/cl)} [Jargon File].\n\n   Second paragraph.\n\n   (2014-12-17)\n"
    )
    assert clean_definition(body) == "(StarLISP) A data-parallel extension of Common LISP ."


def test_real_foldoc_entries_and_the_retrieval_set():
    entries = load_entries()
    assert len(entries) > 11_000
    by_word = {w: e for e in entries for w in e.headwords}
    assert "Source Code Control System" in by_word["SCCS"].definition
    queries, corpus, relevant = foldoc_retrieval(n_queries=50, n_corpus=200)
    assert (len(queries), len(corpus)) == (50, 200)
    assert all(relevant[q] and relevant[q] <= corpus.keys() for q in queries)
    assert foldoc_retrieval(n_queries=50, n_corpus=200) == (queries, corpus, relevant)  # same on every call


def test_smaller_sets_are_prefixes_of_the_held_out_set_every_build_guards():
    queries, corpus, _ = foldoc_retrieval()
    assert (len(queries), len(corpus)) == (300, 1500)
    guarded = set(heldout_texts())
    assert guarded == {*queries.values(), *corpus.values()}
    small_queries, small_corpus, _ = foldoc_retrieval(n_queries=20, n_corpus=60)
    assert {*small_queries.values(), *small_corpus.values()} <= guarded


def test_the_held_out_set_is_the_one_published_scores_were_measured_on():
    """FOLDOCDefinitionRetrieval's texts and judgements, hashed: reading or sampling FOLDOC differently must bump
    local_tasks.FOLDOC_REVISION (and re-measure), never pass unnoticed."""
    queries, corpus, relevant = foldoc_retrieval()
    judged = {query: sorted(docs) for query, docs in relevant.items()}
    digest = hashlib.sha256(json.dumps([queries, corpus, judged], sort_keys=True).encode()).hexdigest()
    assert digest == "dc37d3146498462908c20094ac40cd076cbaf3de1a7e9c97862a221a2ea6b189"
