"""Pretraining text: a Hugging Face dataset, local files, or WordNet, as a `datasets.Dataset` of documents.

Everything goes through `datasets`, which memory-maps Arrow files, so a corpus larger than RAM still loads
(a streamed hub dataset is written to an Arrow cache as it arrives).
The result is split into training and held-out documents deterministically.
"""

from __future__ import annotations

import glob
import hashlib
import logging
from pathlib import Path

from neoembed.errors import InputError
from neoembed.pretrain.settings import CorpusSettings

log = logging.getLogger("neoembed.pretrain")

BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


class PretrainCorpusError(InputError):
    """The corpus cannot be read as configured; the message names the file, column or setting."""


def expand_files(patterns: list[str]) -> list[str]:
    files: list[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, recursive=True))
        if not matches:
            raise PretrainCorpusError(f"corpus.files: {pattern!r} matches no file")
        files += matches
    suffixes = {Path(f).suffix for f in files}
    unknown = suffixes - set(BUILDERS)
    if unknown:
        raise PretrainCorpusError(
            f"corpus.files: unsupported file type(s) {sorted(unknown)}; use {sorted(BUILDERS)}"
        )
    if len({BUILDERS[s] for s in suffixes}) > 1:
        raise PretrainCorpusError(
            f"corpus.files: mix of file types {sorted(suffixes)}; give one type per corpus"
        )
    return files


def _wordnet_documents(heldout: bool) -> list[str]:
    """One document per synset: its lemmas, gloss and example sentences, from one side of the split."""
    from neoembed.data import load_synsets, split_of

    wanted = "heldout" if heldout else "train"
    documents = []
    for synset in load_synsets():
        if split_of(synset.id) == wanted:
            examples = " ".join(f'"{e}"' for e in synset.examples)
            documents.append(f"{', '.join(synset.lemmas)}: {synset.gloss}. {examples}".strip())
    return documents


def _load_raw(corpus: CorpusSettings):
    import datasets

    if corpus.files:
        files = expand_files(corpus.files)
        builder = BUILDERS[Path(files[0]).suffix]
        try:
            return datasets.load_dataset(builder, data_files=files, split="train")
        except datasets.exceptions.DatasetGenerationError as err:
            cause = err.__cause__ or err
            if isinstance(cause, UnicodeDecodeError):
                raise PretrainCorpusError(
                    f"corpus.files: a file is not UTF-8 text ({cause}); files: {files}"
                ) from err
            raise PretrainCorpusError(f"corpus.files: cannot parse {files} as {builder}: {cause}") from err
    try:
        if corpus.streaming:
            stream = datasets.load_dataset(
                corpus.dataset, corpus.config, split=corpus.split, revision=corpus.revision, streaming=True
            )
            # Written to an Arrow cache file as it streams, so max_documents need not fit in memory.
            return datasets.Dataset.from_generator(lambda: iter(stream.take(corpus.max_documents)))
        return datasets.load_dataset(
            corpus.dataset, corpus.config, split=corpus.split, revision=corpus.revision
        )
    except (OSError, ValueError, ConnectionError) as err:
        raise PretrainCorpusError(f"corpus.dataset: cannot load {corpus.dataset!r}: {err}") from err


def _is_heldout(text: str, fraction: float) -> bool:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < fraction


def load_corpus(corpus: CorpusSettings):
    """(train, heldout) `datasets.Dataset`s with one column, `text`; empty documents are dropped.

    WordNet uses its own synset split (the one the evaluation tasks hold out); other corpora hold out
    documents by a hash of their text, so the split does not depend on order or on max_documents.
    """
    import datasets

    if corpus.wordnet:
        train = datasets.Dataset.from_dict({"text": _wordnet_documents(heldout=False)})
        heldout = datasets.Dataset.from_dict({"text": _wordnet_documents(heldout=True)})
    else:
        raw = _load_raw(corpus)
        if corpus.text_column not in raw.column_names:
            raise PretrainCorpusError(
                f"corpus.text_column: no column {corpus.text_column!r}; the corpus has {raw.column_names}"
            )
        raw = raw.select_columns([corpus.text_column])
        if corpus.text_column != "text":
            raw = raw.rename_column(corpus.text_column, "text")
        before = len(raw)
        raw = raw.filter(lambda row: isinstance(row["text"], str) and row["text"].strip() != "")
        if len(raw) < before:
            log.warning("corpus: skipped %d empty or non-text documents of %d", before - len(raw), before)
        fraction = corpus.heldout_fraction
        heldout = raw.filter(lambda b: [_is_heldout(t, fraction) for t in b["text"]], batched=True)
        train = raw.filter(lambda b: [not _is_heldout(t, fraction) for t in b["text"]], batched=True)
    if corpus.max_documents is not None and len(train) > corpus.max_documents:
        train = train.select(range(corpus.max_documents))
    if len(train) == 0:
        raise PretrainCorpusError("the corpus has no non-empty training documents")
    return train, heldout
