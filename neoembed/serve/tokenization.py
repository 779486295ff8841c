"""The request side's tokenization: each input is tokenized once, here, and the queue carries its token ids.

Texts are tokenized with the model's own tokenizer (as sentence-transformers configured it, received from
the inference process), so the ids are those `encode` would compute. The Rust tokenizer is called
directly: with truncation and padding switched off once, `encode_batch` changes no tokenizer state, so
request threads share it without a lock, and it releases the interpreter lock while it works.

Token-id inputs are embedded as sent, after a check that they are this model's: every id in the vocabulary,
the model's special-token framing around them (`[CLS] ... [SEP]` for BERT's vocabulary) and no other
special token inside. Ids from another tokenizer (tiktoken's, which LangChain sends by default) lack that
framing, so they are refused instead of being embedded as some other text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from neoembed.serve.errors import InvalidInput
from neoembed.serve.inputs import Inputs

# Default character limit per input, per token of the model's limit: English averages about 4-5 characters a
# token, so only text that could never fit (or a runaway string) is refused by characters alone.
CHARS_PER_TOKEN = 32

NOT_OUR_IDS = (
    "is not a token-id sequence from this model's tokenizer. Token ids are accepted when they are this "
    "model's vocabulary framed by its special tokens, as POST /tokenize returns them ({framing}); ids from "
    "another tokenizer (e.g. tiktoken's, which LangChain's OpenAIEmbeddings sends unless "
    "check_embedding_ctx_length=False) would embed the wrong text. Send the text instead."
)


@dataclass(frozen=True)
class Prepared:
    """Inputs checked and ready to queue: token ids (after truncation) and the positions truncated."""

    ids: list[list[int]]
    truncated: list[int]

    @property
    def tokens(self) -> int:
        return sum(map(len, self.ids))


class RequestTokenizer:
    def __init__(
        self, tokenizer, *, max_length: int, prompt: str | None = None, max_chars: int | None = None
    ) -> None:
        # Requests are already tokenized side by side on request threads. The Rust tokenizer's own rayon
        # pool would add a thread per core that spins after each batch, CPU taken from the inference process
        # on a small machine. The library reads this variable on each call; it has no per-tokenizer switch.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self._tokenizer = tokenizer.backend_tokenizer
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self.max_length = max_length
        # Checked before tokenizing: a 15 MB string took 18 s to tokenize only to be refused for its tokens.
        self.max_chars = max_chars or CHARS_PER_TOKEN * max_length
        self._prompt = prompt or ""
        self._vocab = len(tokenizer)
        framed = self._tokenizer.encode("x").ids
        plain = self._tokenizer.encode("x", add_special_tokens=False).ids
        start = next(i for i in range(len(framed)) if framed[i : i + len(plain)] == plain)
        self._prefix, self._suffix = framed[:start], framed[start + len(plain) :]
        # [UNK] is special but occurs inside any text that has characters outside the vocabulary.
        self._not_inside = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}
        self._framing = " ".join(tokenizer.convert_ids_to_tokens(self._prefix) + ["..."]) + " "
        self._framing += " ".join(tokenizer.convert_ids_to_tokens(self._suffix))

    def prepare(self, inputs: Inputs, *, truncate: bool, field: str) -> Prepared:
        """Token ids for every input, with the length rule applied: reject, or truncate and report."""
        if inputs.token_ids is not None:
            self._check_ids(inputs.token_ids, field)
            ids = inputs.token_ids
        else:
            assert inputs.texts is not None  # texts or token ids, one of the two
            texts = [self._prompt + text for text in self._within_chars(inputs.texts, truncate, field)]
            ids = [encoding.ids for encoding in self._tokenizer.encode_batch(texts)]
        over = [i for i, sequence in enumerate(ids) if len(sequence) > self.max_length]
        if over and not truncate:
            i = over[0]
            raise InvalidInput(
                f"'{field}[{i}]' is {len(ids[i])} tokens long; this model takes at most {self.max_length} "
                "tokens per input. Shorten it, or let the server truncate (start it with --truncate, "
                'or send "truncate": true to /embed).',
                param=field,
                code="context_length_exceeded",
            )
        if over:
            ids = list(ids)
            for i in over:
                ids[i] = self._truncated(ids[i])
        return Prepared(ids, over)

    def _within_chars(self, texts: list[str], truncate: bool, field: str) -> list[str]:
        """The texts, each at most `max_chars` characters: a longer one is refused, or cut when truncating
        (the cut keeps far more characters than max_length tokens span, so truncation by tokens decides)."""
        over = next((i for i, text in enumerate(texts) if len(text) > self.max_chars), None)
        if over is None:
            return texts
        if not truncate:
            raise InvalidInput(
                f"'{field}[{over}]' is {len(texts[over]):,} characters long; this server takes at most "
                f"{self.max_chars:,} characters per input (--max-input-chars) and {self.max_length} tokens. "
                "Shorten it, or let the server truncate (start it with --truncate, or send "
                '"truncate": true to /embed).',
                param=field,
                code="context_length_exceeded",
            )
        return [text[: self.max_chars] for text in texts]

    def _truncated(self, ids: list[int]) -> list[int]:
        """The first max_length tokens with the closing special tokens kept, as the tokenizer truncates."""
        return ids[: self.max_length - len(self._suffix)] + self._suffix

    def _check_ids(self, sequences: list[list[int]], field: str) -> None:
        prefix, suffix = self._prefix, self._suffix
        for i, ids in enumerate(sequences):
            outside = next((t for t in ids if not 0 <= t < self._vocab), None)
            if outside is not None:
                raise InvalidInput(
                    f"'{field}[{i}]' contains token id {outside}, outside this model's vocabulary "
                    f"(0..{self._vocab - 1}); it {NOT_OUR_IDS.format(framing=self._framing)}",
                    param=field,
                    code="invalid_token_ids",
                )
            framed = (
                len(ids) >= len(prefix) + len(suffix)
                and ids[: len(prefix)] == prefix
                and ids[len(ids) - len(suffix) :] == suffix
            )
            inside = ids[len(prefix) : len(ids) - len(suffix)]
            if not framed or any(t in self._not_inside for t in inside):
                raise InvalidInput(
                    f"'{field}[{i}]' {NOT_OUR_IDS.format(framing=self._framing)}",
                    param=field,
                    code="invalid_token_ids",
                )

    def tokenize(self, texts: list[str], *, add_special_tokens: bool, field: str) -> list[list[dict]]:
        """Tokens of each text in the TEI /tokenize shape: id, text span, special flag, character offsets.
        Texts over the character limit are refused, as the embedding routes refuse them (an 8 MB string made
        a 77 MB body)."""
        texts = self._within_chars(texts, truncate=False, field=field)
        result = []
        for text, encoding in zip(
            texts, self._tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)
        ):
            tokens = zip(encoding.ids, encoding.tokens, encoding.special_tokens_mask, encoding.offsets)
            result.append(
                [
                    {
                        "id": token_id,
                        "text": piece if special else text[start:stop],
                        "special": bool(special),
                        "start": None if special else start,
                        "stop": None if special else stop,
                    }
                    for token_id, piece, special, (start, stop) in tokens
                ]
            )
        return result
