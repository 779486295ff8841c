"""Shape checks for request inputs, with messages that name the offending item.

The `input` field of an OpenAI request may be a string, a list of strings, one list of token ids or a list
of token-id lists. Pydantic's union errors for that shape list every branch that failed; checking it by
hand gives one message that says which item is wrong and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from neoembed.serve.errors import InvalidInput


@dataclass(frozen=True)
class Inputs:
    """Either texts or token-id sequences (never both), in request order."""

    texts: list[str] | None = None
    token_ids: list[list[int]] | None = None

    def __len__(self) -> int:
        if self.texts is not None:
            return len(self.texts)
        assert self.token_ids is not None  # one of the two is set
        return len(self.token_ids)


def _kind(value: Any) -> str:
    names = {str: "a string", bool: "a boolean", int: "an integer", float: "a number", list: "a list"}
    names.update({dict: "an object", type(None): "null"})
    return names.get(type(value), type(value).__name__)


def _is_token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_count(count: int, field: str, max_items: int) -> None:
    if count == 0:
        raise InvalidInput(f"'{field}' must not be an empty list.", param=field, code="empty_input")
    if count > max_items:
        raise InvalidInput(
            f"'{field}' has {count} items; at most {max_items} are allowed per request.",
            param=field,
            code="too_many_inputs",
        )


def _check_texts(texts: list[Any], field: str) -> list[str]:
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidInput(
                f"'{field}[{i}]' must be a string like the other items, got {_kind(text)}.",
                param=field,
                code="invalid_type",
            )
        if not text:
            raise InvalidInput(f"'{field}[{i}]' is an empty string.", param=field, code="empty_input")
        if not text.isascii():
            _check_encodable(text, f"{field}[{i}]", field)
    return texts


def _check_encodable(text: str, where: str, field: str) -> None:
    """JSON's \\uXXXX escapes can spell a lone surrogate (half of a UTF-16 pair), which is no character: no
    tokenizer takes it. Refuse it by position rather than let it fail deep inside one."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidInput(
            f"'{where}' holds a lone surrogate (U+{ord(text[err.start]):04X} at character {err.start}), which "
            "is not valid Unicode text.",
            param=field,
            code="invalid_text",
        ) from None


def parse_texts(value: Any, max_items: int, field: str = "inputs") -> list[str]:
    """A string or a non-empty list of non-empty strings."""
    if isinstance(value, str):
        return _check_texts([value], field)
    if not isinstance(value, list):
        raise InvalidInput(
            f"'{field}' must be a string or a list of strings, got {_kind(value)}.",
            param=field,
            code="invalid_type",
        )
    _check_count(len(value), field, max_items)
    return _check_texts(value, field)


def parse_openai_input(value: Any, max_items: int) -> Inputs:
    """The `input` of POST /v1/embeddings in any of OpenAI's four forms."""
    field = "input"
    if isinstance(value, str) or (isinstance(value, list) and value and isinstance(value[0], str)):
        return Inputs(texts=parse_texts(value, max_items, field))
    if not isinstance(value, list):
        raise InvalidInput(
            f"'{field}' must be a string, a list of strings, a list of token ids or a list of token-id "
            f"lists, got {_kind(value)}.",
            param=field,
            code="invalid_type",
        )
    sequences = [value] if value and _is_token_id(value[0]) else value  # a flat list of ids is one input
    _check_count(len(sequences), field, max_items)
    for i, ids in enumerate(sequences):
        where = f"{field}[{i}]" if sequences is value else field
        if not isinstance(ids, list):
            raise InvalidInput(
                f"'{where}' must be a list of token ids like the other items, got {_kind(ids)}.",
                param=field,
                code="invalid_type",
            )
        if not ids:
            raise InvalidInput(f"'{where}' is an empty token-id list.", param=field, code="empty_input")
        bad = next((j for j, token in enumerate(ids) if not _is_token_id(token)), None)
        if bad is not None:
            raise InvalidInput(
                f"'{where}[{bad}]' must be an integer token id, got {_kind(ids[bad])}.",
                param=field,
                code="invalid_type",
            )
    return Inputs(token_ids=sequences)
