"""The model side of the server: token counting, length limits, token-id verification, and encode.

`embed` runs only on the batcher's worker thread. The request-side methods (`prepare`, `tokenize`) run on
request threads and use their own copy of the tokenizer behind a lock: a fast tokenizer is one Rust object
whose truncation/padding state `__call__` mutates, so sharing it with the worker's `encode` can fail with
"Already borrowed".
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass

import numpy as np

from neoembed.embedder import load_embedder
from neoembed.serve.errors import InvalidInput
from neoembed.serve.inputs import Inputs
from neoembed.serve.settings import ServeSettings

NOT_OUR_IDS = (
    "is not a token-id sequence from this model's tokenizer. Token ids are accepted only when re-tokenizing "
    "the text they decode to gives back exactly the same ids, special tokens included (as POST /tokenize "
    "returns them); ids from another tokenizer (e.g. tiktoken's, which LangChain's OpenAIEmbeddings sends "
    "unless check_embedding_ctx_length=False) would embed the wrong text. Send the text instead."
)


def load_model(settings: ServeSettings):
    """The embedder named by the settings, on its device, in fp32 as stored (see `to_serving_dtype`)."""
    return load_embedder(settings.model, device=settings.device, max_seq_length=settings.max_input_length)


def to_serving_dtype(model, settings: ServeSettings):
    """The model in the settings' dtype: fp32 on CPU, half precision on GPU under `auto`."""
    import torch

    from neoembed.precision import resolve_precision

    dtype = resolve_precision(settings.dtype, str(model.device)).weight_dtype
    if dtype != torch.float32:
        model.to(dtype)
    return model


@dataclass(frozen=True)
class Prepared:
    """Inputs checked and ready to queue: texts, their token counts (after truncation), truncated positions."""

    texts: list[str]
    tokens: list[int]
    truncated: list[int]


class Backend:
    def __init__(self, model) -> None:
        self.model = model
        self.max_length = int(model.max_seq_length)
        self._tokenizer = copy.deepcopy(model.tokenizer)
        self._lock = threading.Lock()
        # One real encode: it gives the output dimension for any module stack and warms the model up.
        self.dimension = int(self.embed(["warm-up"]).shape[1])

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embeddings of `texts` exactly as `SentenceTransformer.encode` computes them (float32 rows)."""
        vectors = self.model.encode(
            texts, batch_size=len(texts), show_progress_bar=False, convert_to_numpy=True
        )
        return np.asarray(vectors, dtype=np.float32)

    def _encode_ids(self, texts: list[str], add_special_tokens: bool = True, **kwargs) -> dict:
        with self._lock:
            return self._tokenizer(
                texts,
                add_special_tokens=add_special_tokens,
                truncation=False,
                return_attention_mask=False,
                return_token_type_ids=False,
                verbose=False,
                **kwargs,
            )

    def prepare(self, inputs: Inputs, *, truncate: bool, field: str) -> Prepared:
        """Count tokens, verify token ids, and apply the length rule: reject, or truncate and report."""
        if inputs.token_ids is not None:
            texts = self._verify_token_ids(inputs.token_ids, field)
            lengths = [len(ids) for ids in inputs.token_ids]
        else:
            texts = inputs.texts
            lengths = [len(ids) for ids in self._encode_ids(texts)["input_ids"]]
        over = [i for i, n in enumerate(lengths) if n > self.max_length]
        if over and not truncate:
            i = over[0]
            raise InvalidInput(
                f"'{field}[{i}]' is {lengths[i]} tokens long; this model takes at most {self.max_length} "
                "tokens per input. Shorten it, or let the server truncate (start it with --truncate, "
                'or send "truncate": true to /embed).',
                param=field,
                code="context_length_exceeded",
            )
        # encode truncates to max_seq_length itself; the counts here are what it will embed.
        return Prepared(texts, [min(n, self.max_length) for n in lengths], over)

    def _verify_token_ids(self, sequences: list[list[int]], field: str) -> list[str]:
        """The texts that `sequences` are the canonical tokenization of, or a 400 naming the first that is not.

        The rule: ids are this model's only if tokenizing their decoded text reproduces them exactly. Ids
        from another vocabulary decode to some text whose own tokenization differs (and lack this model's
        special-token framing), so they are refused instead of being embedded as the wrong text.
        """
        vocab = len(self._tokenizer)
        for i, ids in enumerate(sequences):
            outside = next((t for t in ids if not 0 <= t < vocab), None)
            if outside is not None:
                raise InvalidInput(
                    f"'{field}[{i}]' contains token id {outside}, outside this model's vocabulary "
                    f"(0..{vocab - 1}); it {NOT_OUR_IDS}",
                    param=field,
                    code="invalid_token_ids",
                )
        with self._lock:
            texts = self._tokenizer.batch_decode(sequences, skip_special_tokens=True)
        again = self._encode_ids(texts)["input_ids"]
        for i, (ids, redone) in enumerate(zip(sequences, again)):
            if list(redone) != ids:
                raise InvalidInput(f"'{field}[{i}]' {NOT_OUR_IDS}", param=field, code="invalid_token_ids")
        return texts

    def tokenize(self, texts: list[str], *, add_special_tokens: bool) -> list[list[dict]]:
        """Tokens of each text in the TEI /tokenize shape: id, text span, special flag, character offsets."""
        encoded = self._encode_ids(texts, add_special_tokens, return_offsets_mapping=True)
        special = set(self._tokenizer.all_special_ids)
        result = []
        for text, ids, offsets in zip(texts, encoded["input_ids"], encoded["offset_mapping"]):
            pieces = self._tokenizer.convert_ids_to_tokens(ids)
            result.append(
                [
                    {
                        "id": token_id,
                        "text": piece if token_id in special else text[start:stop],
                        "special": token_id in special,
                        "start": None if token_id in special else start,
                        "stop": None if token_id in special else stop,
                    }
                    for token_id, piece, (start, stop) in zip(ids, pieces, offsets)
                ]
            )
        return result
