"""Truncation of long texts to a token budget, at a token boundary, as the trainer's tokenizer would cut them.

The build truncates rather than drops long texts: GitHub issues average about 4,200 characters, and a
character cap drops most of them (`too_long`), while the code release kept them, cut at 1024 tokens. The cut is
made on the text (the records stay text) at the end offset of the last token that fits, so the trainer's
tokenizer at the same length sees the same tokens. The default tokenizer is the packaged MiniLM's, which is
bert-base-uncased's WordPiece vocabulary: NeoBERT's own tokenizer, so the budget is counted in the tokens the
model trained on the records will see, and it is on every machine without a download.
"""

from __future__ import annotations

from functools import cached_property

SPECIAL_TOKENS = 2  # [CLS] and [SEP]: the budget is the model's input length, as in max_seq_length
PREFIX_CHARS_PER_TOKEN = 12  # English WordPiece averages 4-5 characters a token


class Truncator:
    """`truncator(text)` -> (text cut to `max_tokens` tokens with the special tokens, whether it was cut)."""

    def __init__(self, tokenizer: str, max_tokens: int):
        if max_tokens <= SPECIAL_TOKENS:
            raise ValueError(f"max_tokens must exceed the {SPECIAL_TOKENS} special tokens, got {max_tokens}")
        self.name, self.budget = tokenizer, max_tokens - SPECIAL_TOKENS

    @cached_property
    def _tokenizer(self):
        """The Rust tokenizer behind the transformers one: offsets for one text without Python overhead."""
        from transformers import AutoTokenizer

        from neoembed.embedder import resolve_model_name

        backend = AutoTokenizer.from_pretrained(
            resolve_model_name(self.name), use_fast=True
        ).backend_tokenizer
        backend.no_truncation()
        backend.no_padding()
        return backend

    def __call__(self, text: str) -> tuple[str, bool]:
        # Fast path, exact: a WordPiece token spans at least one character, and an ASCII character does not
        # expand under the tokenizer's normaliser (Hangul, for one, decomposes into several), so a short ASCII
        # text cannot exceed the budget. Most texts of most sources take this path.
        if len(text) <= self.budget and text.isascii():
            return text, False
        # A very long text is tokenized through a prefix first, cut at a space: tokens never span whitespace,
        # so the prefix's tokens are the first ones of the whole text, and enough of them decide the cut.
        prefix = text
        if len(text) > self.budget * PREFIX_CHARS_PER_TOKEN:
            space = text.rfind(" ", 0, self.budget * PREFIX_CHARS_PER_TOKEN)
            prefix = text[:space] if space > 0 else text
        offsets = self._tokenizer.encode(prefix, add_special_tokens=False).offsets
        if len(prefix) < len(text) and len(offsets) <= self.budget:
            offsets = self._tokenizer.encode(text, add_special_tokens=False).offsets
        if len(offsets) <= self.budget:
            return text, False
        return text[: offsets[self.budget - 1][1]].rstrip(), True
