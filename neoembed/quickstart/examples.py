"""What the quickstart searches and runs: held-out WordNet example sentences as queries, an optional small
gloss corpus for toy runs, and the snippet a retrieval app would use to load `neobert-embed`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

LOAD_SNIPPET = """\
import neoembed  # registers NeoBERT with transformers (or pass trust_remote_code=True instead)
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("neobert-embed")
sentences = ["a dog runs in the park", "a puppy plays on the grass", "the stock market fell today"]
embeddings = model.encode(sentences, normalize_embeddings=True)
print("dimension:", embeddings.shape[1])
print("similarities:")
print(model.similarity(embeddings, embeddings).numpy().round(3))
"""


class SearchedQuery(TypedDict):
    """A held-out query searched for: part of the index step's result (JSON, and read back on a resume)."""

    query: str
    expected: str  # the synset whose gloss is the right answer
    rank: int | None  # where that gloss came among the hits; None: not among them
    hits: list[dict[str, Any]]  # as `neoembed search --json` returned them: id, text, score, rank, ...


@dataclass(frozen=True)
class SearchQuery:
    text: str  # an example sentence of a held-out synset
    synset: str  # the id of that synset: its gloss is the right answer

    def with_hits(self, hits: list[dict[str, Any]]) -> SearchedQuery:
        """The query, its expected synset and where it ranked among the `hits` `neoembed search --json`
        returned for it."""
        ranks = [rank for rank, hit in enumerate(hits, start=1) if hit["id"] == self.synset]
        return SearchedQuery(
            query=self.text, expected=self.synset, rank=ranks[0] if ranks else None, hits=hits
        )


def search_queries(count: int) -> list[SearchQuery]:
    """The first `count` held-out synsets (never seen in training) with a whole example sentence."""
    from neoembed.evaluation import heldout_synsets

    def whole_sentence(example: str) -> bool:
        return len(example.split()) >= 6 and "..." not in example

    chosen = [s for s in heldout_synsets() if s.gloss and s.examples and whole_sentence(s.examples[0])]
    return [SearchQuery(s.examples[0], s.id) for s in chosen[:count]]


def write_gloss_corpus(path: Path, documents: int, queries: list[SearchQuery]) -> Path:
    """The first `documents` WordNet glosses as jsonl, the queries' synsets included, for toy-sized runs."""
    from neoembed.data import load_synsets
    from neoembed.index import wordnet_documents

    wanted = {q.synset for q in queries}
    synsets = load_synsets()
    chosen = [s for s in synsets if s.id in wanted] + [s for s in synsets if s.id not in wanted]
    with path.open("w", encoding="utf-8") as f:
        for doc in wordnet_documents(chosen[:documents]):
            f.write(json.dumps({"id": doc.id, "text": doc.text, **doc.metadata}) + "\n")
    return path
