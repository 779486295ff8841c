"""FOLDOC, the cross-source held-out set: parsed from Debian's dict-foldoc (installed into the cache if absent)."""

from neoembed.data.foldoc import clean_definition, load_entries
from neoembed.evaluation.local_tasks import foldoc_retrieval


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
