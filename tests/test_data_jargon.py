"""The Jargon File, the third held-out corpus of `bench adapt`: parsed from Debian's dict-jargon (installed into
the cache if absent), its held-out term -> definition set, the set kind and mteb task, and `neoembed adapt` on
the bench's jargon corpus never training on a held-out term."""

import gzip
import hashlib
import json
import re
from collections import defaultdict

import pytest
from typer.testing import CliRunner

from neoembed.data import dictd
from neoembed.data.jargon import clean_definition, jargon_retrieval, load_entries
from neoembed.errors import InputError


def test_the_definition_is_the_first_sense_without_its_notes_as_plain_text():
    body = (
        "    [from ‘de-resolve’ via the movie Tron] (also derez)\n\n"
        "    1. vi. [common] To disappear or {dissolve}; the image that goes with it is of an\n"
        "    object breaking up.\n\n    2. vt. The second sense.\n"
    )
    assert (
        clean_definition(body)
        == "To disappear or dissolve; the image that goes with it is of an object breaking up."
    )
    assert clean_definition("    (also derez)\n\n    alt.: NOP /nop/ [no operation]\n") == ""  # variants only


def test_a_damaged_dictd_database_is_one_error_naming_the_file(tmp_path):
    (tmp_path / "x.dict.dz").write_bytes(gzip.compress(b"term\n\n    A definition.\n"))
    (tmp_path / "x.index").write_text("00-database-url\tA\tB\nterm\tA\tY\n")
    assert dictd.entry_texts(tmp_path, "x") == ["term\n\n    A definition.\n"]
    (tmp_path / "x.index").write_text("term\tA\tY\nother\tA\t#\n")
    with pytest.raises(InputError, match=r"x\.index:2: offset or length"):
        dictd.entry_texts(tmp_path, "x")
    (tmp_path / "x.dict.dz").write_bytes(gzip.compress(b"term\n\n    A definition.\n")[:-9])
    with pytest.raises(InputError, match=r"x\.dict\.dz: not a whole gzip"):
        dictd.entry_texts(tmp_path, "x")


def test_real_entries_are_plain_text_definitions():
    entries = load_entries()
    assert len(entries) > 2_000
    opening_markup = re.compile(r"\[|\d+[.,]\s|(n|v|vt|vi|adj|adv|obs)\.[\s,]|/[^/\s]+/\s")
    for entry in entries:
        words = entry.definition.split()
        assert dictd.MIN_WORDS <= len(words) <= dictd.MAX_WORDS, entry
        assert not re.search("[{}\xad]", entry.definition) and not opening_markup.match(entry.definition), (
            entry
        )
        assert entry.term == entry.term.strip() and "\n" not in entry.term
    defined = {e.term: e.definition for e in entries}
    assert defined["ACK"].startswith("Acknowledge. Used to register one's presence")  # `1. [common; ...]`
    assert defined["kludge"].startswith(
        "Incorrect (though regrettably common) spelling of kluge"
    )  # `/kluhj/ n.`
    assert defined["sporgery"].startswith("Massive floods of forged articles")  # a note the source left open
    assert defined["BCPL"].startswith("A programming language developed by Martin Richards")  # `[...”) A`
    assert defined["fence"].startswith("A sequence of one or more")  # `n.` a paragraph of its own
    assert defined["mailbomb"].startswith("To send, or urge others to send")  # `(also mail bomb) [Usenet]`
    assert defined["marketroid"].startswith("A member of a company's marketing department")  # `alt.: ... .`


def test_the_held_out_sample_is_fixed_and_every_query_has_one_unambiguous_answer():
    queries, corpus, relevant = jargon_retrieval()
    # a fixed sample of the whole file, the same on every machine (published scores rest on it): reading or
    # sampling the Jargon File differently must bump local_tasks.JARGON_REVISION, never pass unnoticed
    assert list(queries.values())[:3] == ["blow out", "broket", "I didn't change anything!"]
    judged = {query: sorted(docs) for query, docs in relevant.items()}
    digest = hashlib.sha256(json.dumps([queries, corpus, judged], sort_keys=True).encode()).hexdigest()
    assert digest == "49b690970f43ff571b93e4dbe3b506ceefffd7781a462b91d7e4acf5bc105d1b"  # jargon-4.4.7-v2
    entries = load_entries()
    definitions = {" ".join(e.definition.split()).casefold() for e in entries}
    assert len(queries) == 300 and len(corpus) == len(definitions)  # every distinct definition, once
    assert len({t.casefold() for t in queries.values()}) == 300
    defines = defaultdict(set)  # term -> its definitions, read from the file directly
    for entry in entries:
        defines[entry.term.casefold()].add(entry.definition)
    for query, term in queries.items():
        assert {corpus[doc] for doc in relevant[query]} == defines[term.casefold()]
    # a smaller set is a prefix of the full one
    small_queries, small_corpus, _ = jargon_retrieval(n_queries=20, n_corpus=100)
    assert small_corpus == dict(list(corpus.items())[:100])
    assert set(small_queries.values()) <= set(queries.values())


def test_jargon_is_a_held_out_set_kind_and_an_mteb_task(minilm_path):
    from sentence_transformers import SentenceTransformer

    from neoembed.contrastive.evaluation import build_evaluator, prompt_source, retrieval_set
    from neoembed.contrastive.settings import EvalSettings
    from neoembed.evaluation.tasks import select_tasks

    settings = EvalSettings.model_validate({"sets": [{"kind": "jargon", "queries": 20, "corpus": 100}]})
    (spec,) = settings.sets
    assert retrieval_set(spec) == jargon_retrieval(n_queries=20, n_corpus=100)
    assert prompt_source(spec) is None  # no training source: the export's default prompts
    evaluator = build_evaluator(settings)
    scores = evaluator(SentenceTransformer(str(minilm_path)))
    assert (
        scores["jargon_cosine_ndcg@10"] > 0.3
    )  # MiniLM finds a term's definition among 100, far above chance
    (task,) = select_tasks(["JargonDefinitionRetrieval"])
    task.load_data()
    split = task.dataset["default"]["test"]
    assert (len(split["queries"]), len(split["corpus"])) == (300, len(jargon_retrieval()[1]))


def test_adapting_on_the_bench_corpus_never_trains_on_a_held_out_term(tmp_path, minilm_path):
    """One-word `terms` queries over the whole corpus: unguarded, some would be held-out terms (a definition's
    rarest word is often the term it defines); the built-in guard keeps every one of them out of training and
    selection, with no guard file named."""
    from test_contrastive import tiny_encoder_dir

    from neoembed.adapt import make_pairs
    from neoembed.bench.adapt import write_corpora
    from neoembed.cli import app
    from neoembed.data import load_records

    (corpus,) = write_corpora(tmp_path / "corpora", ["jargon"], packages=100)
    written = corpus.file.stat().st_mtime_ns
    write_corpora(tmp_path / "corpora", ["jargon"], packages=100)  # unchanged: the run's pairs stay valid
    assert corpus.file.stat().st_mtime_ns == written
    documents = corpus.file.read_text().splitlines()
    assert documents == list(jargon_retrieval()[1].values()) and not corpus.eval_texts
    held_out = {term.casefold() for term in jargon_retrieval()[0].values()}
    unguarded = make_pairs(documents, ["terms"], seed=0, term_words=1)["terms"]
    assert any(query.casefold() in held_out for query, _ in unguarded)

    out, base = tmp_path / "run", tiny_encoder_dir(tmp_path, minilm_path)
    args = [
        "adapt", "--corpus", str(corpus.file), "--out", str(out), "--model", str(base), "--steps", "35",
        "--train.batch_size", "64", "--train.threads", "1", "--train.eval_steps", "35",
        "--train.save_steps", "35", "--train.log_steps", "5", "--corpus.selection", "40",
        "--model.max_length", "32", "--eval.sets", "[]",
        "--export.selection.general", "[]", "--pairs.methods", '["terms"]', "--pairs.term_words", "1",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (
        json.loads((out / "adapt.json").read_text())["pairs"]["terms"] >= len(documents) - 100
    )  # a full pass
    for made in ("pairs", "selection"):
        queries = {q.casefold() for rows in load_records(out / made).values() for q in rows["query"]}
        assert queries and not queries & held_out
