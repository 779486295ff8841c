"""Offline MTEB tasks built from WordNet's held-out synsets and from FOLDOC, as real mteb task classes.

mteb's own tasks download their data from the Hugging Face hub; these build theirs from Debian text packages
on this machine: WordNet (``neoembed.data.wordnet``), using only synsets that ``split_of`` holds out from
training, so a model fine-tuned on neoembed's WordNet pairs is not tested on its training data; and FOLDOC
(``neoembed.data.foldoc``, where its held-out sample ``foldoc_retrieval`` is defined, beside the reader, so
that every build's leakage guard can drop its texts), a computing dictionary no training build reads: the
cross-source check that fine-tuning improved the model rather than fitting WordNet. They run through
``mteb.evaluate`` like any other task and are selected by name with ``--tasks`` (or all at once with
``--benchmark neoembed-local``).

- ``WordNetDefinitionRetrieval`` (Retrieval): a word or phrase -> the glosses of its senses.
- ``WordNetExampleDefinitionRetrieval`` (Retrieval): an example sentence -> the gloss of its synset.
- ``WordNetSynonymPairClassification`` (PairClassification): are two words lemmas of one synset?
- ``WordNetPOSClassification`` (Classification): the part of speech of a gloss's headword.
- ``FOLDOCDefinitionRetrieval`` (Retrieval): a computing term -> its FOLDOC definition.

Sizes are small on purpose: all five run in seconds for MiniLM on two CPU cores. Two more, by name only, are
the held-out sets of the corpora `neoembed bench adapt` adapts on besides FOLDOC:

- ``PackageDescriptionRetrieval`` (Retrieval): a Debian package's synopsis -> its long description.
- ``JargonDefinitionRetrieval`` (Retrieval): a Jargon File term -> its definition (``neoembed.data.jargon``).
"""

from __future__ import annotations

import functools
import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from neoembed.mteb_setup import mteb  # noqa: F401 - sets MTEB_CACHE before mteb loads

from datasets import Dataset, DatasetDict
from mteb import AbsTask, TaskMetadata
from mteb.abstasks.classification import AbsTaskClassification
from mteb.abstasks.pair_classification import AbsTaskPairClassification
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData

from neoembed.data import ColumnMap, foldoc_retrieval, jargon_retrieval, packages_retrieval, read_test_set
from neoembed.evaluation.wordnet_sets import SEED, heldout_synsets, wordnet_example_retrieval

# Bump when the sampling below changes: it is the tasks' dataset revision, so cached results of an older
# sample are never mixed with new ones.
DATA_REVISION = "wordnet3.0-heldout-v1"
FOLDOC_REVISION = "foldoc-20230119-v1"
PACKAGES_REVISION = "bookworm-descriptions-v1"
JARGON_REVISION = "jargon-4.4.7-v2"
POS_NAMES = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}

_COMMON = {
    "reference": "https://wordnet.princeton.edu/",
    "dataset": {"path": "neoembed/wordnet-heldout", "revision": DATA_REVISION},
    "category": "t2t",
    "modalities": ["text"],
    "eval_splits": ["test"],
    "eval_langs": ["eng-Latn"],
    "date": ("2006-01-01", "2006-12-31"),  # WordNet 3.0
    "domains": ["Written", "Encyclopaedic"],
    "task_subtypes": [],
    "license": "https://wordnet.princeton.edu/license-and-commercial-use",
    "annotations_creators": "expert-annotated",
    "dialect": [],
    "sample_creation": "found",
    "bibtex_citation": "@book{fellbaum1998wordnet, title={WordNet: An Electronic Lexical Database}, "
    "author={Fellbaum, Christiane}, publisher={MIT Press}, year={1998}}",
}


@functools.lru_cache(maxsize=1)
def definition_retrieval_split(n_corpus: int = 800, n_queries: int = 200) -> RetrievalSplitData:
    """Corpus: glosses of `n_corpus` held-out synsets; queries: lemmas; relevant: every sense of the lemma."""
    corpus = [s for s in heldout_synsets() if s.gloss][:n_corpus]
    senses = defaultdict(list)  # lemma -> ids of the corpus synsets that have it
    for synset in corpus:
        for lemma in dict.fromkeys(lemma.lower() for lemma in synset.lemmas):
            senses[lemma].append(synset.id)
    lemmas = list(dict.fromkeys(s.lemmas[0].lower() for s in corpus))[:n_queries]
    return _retrieval_split(
        queries={f"q{i}": lemma for i, lemma in enumerate(lemmas)},
        corpus={s.id: s.gloss for s in corpus},
        relevant={f"q{i}": senses[lemma] for i, lemma in enumerate(lemmas)},
    )


def example_retrieval_split() -> RetrievalSplitData:
    """`wordnet_example_retrieval` as an mteb split."""
    return _retrieval_split(*wordnet_example_retrieval())


def _retrieval_split(queries: dict, corpus: dict, relevant: dict) -> RetrievalSplitData:
    """An mteb retrieval split from id -> text maps and query id -> relevant document ids (or {id: grade})."""
    return RetrievalSplitData(
        queries=Dataset.from_dict({"id": list(queries), "text": list(queries.values())}),
        corpus=Dataset.from_dict(
            {"id": list(corpus), "text": list(corpus.values()), "title": [""] * len(corpus)}
        ),
        relevant_docs={
            q: dict(docs) if isinstance(docs, dict) else dict.fromkeys(docs, 1)
            for q, docs in relevant.items()
        },
        top_ranked=None,
    )


def synonym_pairs(n_pairs: int = 400) -> Dataset:
    """Half synonym pairs (two lemmas of one synset), half same-POS lemmas of synsets sharing no lemma."""
    rng = random.Random(SEED)
    multi = [s for s in heldout_synsets() if len({lemma.lower() for lemma in s.lemmas}) > 1]
    by_pos = defaultdict(list)
    for synset in heldout_synsets():
        by_pos[POS_NAMES[synset.pos]].append(synset)
    rows = []
    for synset in multi[: n_pairs // 2]:
        first, second = rng.sample(sorted({lemma.lower() for lemma in synset.lemmas}), 2)
        rows.append((first, second, 1))
        own = {lemma.lower() for lemma in synset.lemmas}
        other = rng.choice(by_pos[POS_NAMES[synset.pos]])
        while other.id == synset.id or own & {lemma.lower() for lemma in other.lemmas}:
            other = rng.choice(by_pos[POS_NAMES[synset.pos]])
        rows.append((rng.choice(sorted(own)), other.lemmas[0].lower(), 0))
    return Dataset.from_dict(
        {"sentence1": [r[0] for r in rows], "sentence2": [r[1] for r in rows], "labels": [r[2] for r in rows]}
    )


def pos_classification(per_label: int = 50) -> DatasetDict:
    """Glosses labelled with their synset's part of speech; `per_label` per class in train and in test."""
    by_pos = defaultdict(list)
    for synset in heldout_synsets():
        if synset.gloss:
            by_pos[POS_NAMES[synset.pos]].append(synset.gloss)
    labels = sorted(by_pos)
    splits = {}
    for name, part in (("train", slice(0, per_label)), ("test", slice(per_label, 2 * per_label))):
        rows = [(gloss, labels.index(pos)) for pos in labels for gloss in by_pos[pos][part]]
        splits[name] = Dataset.from_dict({"text": [r[0] for r in rows], "label": [r[1] for r in rows]})
    return DatasetDict(splits)


class _HeldOutRetrieval(AbsTaskRetrieval):
    """A retrieval task whose one test split `split()` builds, on first use."""

    split: Callable[[], RetrievalSplitData]

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        if self.data_loaded:
            return
        self.dataset = {"default": {"test": type(self).split()}}
        self.data_loaded = True


class WordNetDefinitionRetrieval(_HeldOutRetrieval):
    metadata = TaskMetadata(
        name="WordNetDefinitionRetrieval",
        description="Retrieve the WordNet definitions (glosses) of a word's senses from 800 held-out "
        "glosses; 200 word or phrase queries, every sense in the corpus is relevant.",
        type="Retrieval",
        main_score="ndcg_at_10",
        **_COMMON,
    )
    split = staticmethod(definition_retrieval_split)


class WordNetExampleDefinitionRetrieval(_HeldOutRetrieval):
    metadata = TaskMetadata(
        name="WordNetExampleDefinitionRetrieval",
        description="Retrieve the WordNet definition of a held-out synset from one of its example sentences: "
        "500 example queries, 2,000 held-out glosses (the set `neoembed contrastive` evaluates during training).",
        type="Retrieval",
        main_score="ndcg_at_10",
        **_COMMON,
    )
    split = staticmethod(example_retrieval_split)


class WordNetSynonymPairClassification(AbsTaskPairClassification):
    metadata = TaskMetadata(
        name="WordNetSynonymPairClassification",
        description="Decide whether two words are synonyms (lemmas of one held-out WordNet synset); negatives "
        "pair a word with a same-POS word of a synset sharing no lemma. 400 pairs, balanced.",
        type="PairClassification",
        main_score="max_ap",
        **_COMMON,
    )

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        if self.data_loaded:
            return
        self.dataset = DatasetDict({"test": synonym_pairs()})
        self.data_loaded = True


class WordNetPOSClassification(AbsTaskClassification):
    metadata = TaskMetadata(
        name="WordNetPOSClassification",
        description="Classify a held-out WordNet gloss by the part of speech of the word it defines (noun, "
        "verb, adjective, adverb); 50 glosses per class in train and in test.",
        type="Classification",
        main_score="accuracy",
        **_COMMON,
    )
    samples_per_label = 16
    n_experiments = 5

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        if self.data_loaded:
            return
        self.dataset = pos_classification()
        self.data_loaded = True


class FOLDOCDefinitionRetrieval(_HeldOutRetrieval):
    metadata = TaskMetadata(
        name="FOLDOCDefinitionRetrieval",
        description="Retrieve the definition of a computing term from 1,500 entries of FOLDOC, the Free On-line "
        "Dictionary of Computing (Debian's dict-foldoc): 300 term queries. A source no neoembed training build "
        "reads: the cross-source held-out set.",
        type="Retrieval",
        main_score="ndcg_at_10",
        **{
            **_COMMON,
            "reference": "https://foldoc.org/",
            "dataset": {"path": "neoembed/foldoc", "revision": FOLDOC_REVISION},
            "date": ("1985-01-01", "2023-01-19"),
            "domains": ["Written", "Encyclopaedic", "Programming"],
            "license": "https://www.gnu.org/licenses/old-licenses/fdl-1.1.html",
            "bibtex_citation": "@misc{foldoc, title={The Free On-line Dictionary of Computing}, "
            "author={Howe, Denis}, howpublished={https://foldoc.org/}, year={2023}}",
        },
    )
    split = staticmethod(lambda: _retrieval_split(*foldoc_retrieval()))


class PackageDescriptionRetrieval(_HeldOutRetrieval):
    metadata = TaskMetadata(
        name="PackageDescriptionRetrieval",
        description="Retrieve a Debian package's long description from its one-line synopsis: 500 synopsis "
        "queries among the descriptions of 2,000 packages (the fixed sample `data.packages.sample_order` "
        "begins with), from the bookworm archive's English description index.",
        type="Retrieval",
        main_score="ndcg_at_10",
        **{
            **_COMMON,
            "reference": "https://www.debian.org/doc/debian-policy/ch-controlfields.html#description",
            "dataset": {"path": "neoembed/debian-packages", "revision": PACKAGES_REVISION},
            "date": ("1993-08-16", "2023-06-10"),
            "domains": ["Written", "Programming"],
            "license": "https://www.debian.org/legal/licenses/",
            "annotations_creators": "derived",
            "bibtex_citation": "",
        },
    )
    split = staticmethod(lambda: _retrieval_split(*packages_retrieval()))


class JargonDefinitionRetrieval(_HeldOutRetrieval):
    metadata = TaskMetadata(
        name="JargonDefinitionRetrieval",
        description="Retrieve the definition of a hacker-slang term from every definition of the Jargon File "
        "4.4.7 (Debian's dict-jargon, about 2,100): 300 held-out term queries, a fixed sample of the file. A "
        "source no neoembed training build reads; `neoembed bench adapt` adapts on its definitions, the "
        "queries guarded.",
        type="Retrieval",
        main_score="ndcg_at_10",
        **{
            **_COMMON,
            "reference": "http://catb.org/~esr/jargon/",
            "dataset": {"path": "neoembed/jargon", "revision": JARGON_REVISION},
            "date": ("1975-01-01", "2003-12-29"),
            "domains": ["Written", "Encyclopaedic", "Programming"],
            "license": "https://sources.debian.org/src/dict-jargon/4.4.7-3.1/debian/copyright/",
            "bibtex_citation": "@misc{jargon, title={The Jargon File, version 4.4.7}, author={Raymond, Eric S.}, "
            "howpublished={http://catb.org/~esr/jargon/}, year={2003}}",
        },
    )
    split = staticmethod(lambda: _retrieval_split(*jargon_retrieval()))


def your_task(path: str, columns: ColumnMap | None = None) -> AbsTask:
    """Your test set as an mteb retrieval task named after it (`mteb-eval -t PATH`): a BEIR folder, or the
    held-out split of a pairs file (`data.retrieval_sets`). Its revision is a digest of the data, so scores
    cached for other contents are not reused."""
    found = read_test_set(path, columns, option="--columns")

    class YourRetrieval(_HeldOutRetrieval):
        metadata = TaskMetadata(
            name=found.name,
            description=found.description[0].upper() + found.description[1:] + ".",
            type="Retrieval",
            main_score="ndcg_at_10",
            **{
                **_COMMON,
                "reference": None,
                "dataset": {"path": f"local/{found.name}", "revision": found.revision},
                "date": None,
                "domains": None,
                "license": None,
                "annotations_creators": None,
                "sample_creation": None,
                "bibtex_citation": "",
            },
        )
        split = staticmethod(lambda: _retrieval_split(found.queries, found.corpus, found.relevant))

    return YourRetrieval()


# The tasks of `--benchmark neoembed-local`, which every quickstart evaluation runs.
LOCAL_BENCHMARK_TASKS: tuple[type[AbsTask], ...] = (
    WordNetDefinitionRetrieval,
    WordNetExampleDefinitionRetrieval,
    WordNetSynonymPairClassification,
    WordNetPOSClassification,
    FOLDOCDefinitionRetrieval,
)
# Every local task by name: the benchmark's, and the held-out sets of the other corpora `neoembed bench adapt`
# adapts on (by name only: the package descriptions come from the Debian mirror's description index).
BY_NAME_ONLY: tuple[type[AbsTask], ...] = (PackageDescriptionRetrieval, JargonDefinitionRetrieval)
LOCAL_TASKS: dict[str, type[AbsTask]] = {
    cls.metadata.name: cls for cls in (*LOCAL_BENCHMARK_TASKS, *BY_NAME_ONLY)
}
