"""A second opinion on mined candidates: a cross-encoder or a second bi-encoder vetoes what the teacher kept.

The teacher's positive-aware margin drops candidates that score close to the positive under the teacher.
Where the teacher cannot tell a paraphrase of the positive from a hard negative, a second model scores the
candidates that would become negatives, and those above `margin` x its score for the positive are dropped.

sentence-transformers' `mine_hard_negatives(cross_encoder=...)` is not called: it replaces the teacher's
scores with the cross-encoder's for all `range_max` candidates of a query and then ranks by them, inside its
own in-memory mining. Here the second model only vetoes, in the teacher's order, the first `candidates`
survivors of a query (a cross-encoder costs a forward pass per pair: a few pairs a query instead of a
hundred), and mining stays the builder's (resumable embeddings, row order, key-based exclusions). The
library's `CrossEncoder.predict` and `SentenceTransformer.encode` do the scoring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

import numpy as np
from pydantic import ConfigDict, Field

from neoembed.errors import InputError
from neoembed.recipes import StrictSettings
from neoembed.vector_file import embed_to_file

PAIR_CHUNK = 65536  # bi-encoder pairs scored per gather + einsum


class RescoreConfig(StrictSettings):
    """`mining.rescore`: the optional second model; each field is the CLI option `--rescore-<field>`."""

    model_config = ConfigDict(frozen=True)

    model: str | None = None
    """Model that rescores the candidates the teacher keeps (unset: no rescoring); see --rescore-kind."""
    kind: Literal["cross-encoder", "bi-encoder"] = "cross-encoder"
    """cross-encoder: a sentence-transformers CrossEncoder; bi-encoder: any embedder, scoring by cosine."""
    margin: float = Field(0.95, ge=0.0, le=1.0)
    """Drop candidates it scores above margin x its score for the positive."""
    candidates: int = Field(10, ge=1)
    """Candidates per query it scores, hardest by the teacher first; negatives come from these."""
    batch_size: int = Field(64, ge=1)
    """Rescoring batch size."""


class Rescorer(Protocol):
    """Scores (query, pool text) pairs of one mining call, given by their indices into `begin`'s lists."""

    def begin(self, queries: list[str], pool: list[str], workdir: Path) -> None: ...

    def scores(self, query: np.ndarray, document: np.ndarray) -> np.ndarray: ...


class CrossEncoderRescorer:
    def __init__(self, config: RescoreConfig):
        from sentence_transformers import CrossEncoder

        try:
            self.model = CrossEncoder(config.model)
        except (OSError, ValueError, KeyError) as err:
            raise InputError(
                f"cannot load rescoring cross-encoder {config.model!r}: {err}", param="rescore"
            ) from err
        self.name, self.batch_size = config.model, config.batch_size

    def begin(self, queries: list[str], pool: list[str], workdir: Path) -> None:
        self.queries, self.pool = queries, pool

    def scores(self, query: np.ndarray, document: np.ndarray) -> np.ndarray:
        pairs = [(self.queries[q], self.pool[d]) for q, d in zip(query.tolist(), document.tolist())]
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        scores = np.asarray(
            self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=len(pairs) > 10_000)
        )
        if scores.ndim != 1:
            raise InputError(
                f"rescoring cross-encoder {self.name!r} gives "
                f"{scores.shape[-1]} scores per pair; rescoring needs one (num_labels=1)",
                param="rescore",
            )
        return scores.astype(np.float32)


class BiEncoderRescorer:
    def __init__(self, config: RescoreConfig, chunk_rows: int):
        from neoembed.embedder import load_embedder

        assert config.model is not None  # load_rescorer makes none without a model
        self.model = load_embedder(config.model)
        self.batch_size, self.chunk_rows = config.batch_size, chunk_rows

    def begin(self, queries: list[str], pool: list[str], workdir: Path) -> None:
        # Files of their own beside the teacher's: a resumed build reuses finished chunks of both.
        self.q_emb, self.p_emb = (
            embed_to_file(
                self.model,
                texts,
                workdir / name,
                chunk_rows=self.chunk_rows,
                batch_size=self.batch_size,
                normalize=True,
                progress=len(texts) > self.chunk_rows // 4,
            )
            for texts, name in ((queries, "rescore-queries.f32"), (pool, "rescore-pool.f32"))
        )

    def scores(self, query: np.ndarray, document: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [
                np.einsum(
                    "ij,ij->i",
                    self.q_emb[query[s : s + PAIR_CHUNK]],
                    self.p_emb[document[s : s + PAIR_CHUNK]],
                )
                for s in range(0, len(query), PAIR_CHUNK)
            ]
            or [np.zeros(0, dtype=np.float32)]
        )


def load_rescorer(config: RescoreConfig, chunk_rows: int) -> Rescorer | None:
    if config.model is None:
        return None
    if config.kind == "cross-encoder":
        return CrossEncoderRescorer(config)
    return BiEncoderRescorer(config, chunk_rows)
