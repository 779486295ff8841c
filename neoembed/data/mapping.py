"""Field paths that map a source row onto a contrastive record.

A path names a column and walks into it: `anchor`, `pos[0]`, `set.query`, `set.pos[0]`, `neg_paras[*].text`.
`[n]` indexes a list, `[*]` maps the rest of the path over every element, `.key` reads a struct field.
Hand-written because `datasets` has no row-level path language; it is small enough to read in one go.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from neoembed.errors import InputError

_SEGMENT = re.compile(r"([A-Za-z_][\w\-]*)((?:\[(?:\d+|\*)\])*)$")
_INDEX = re.compile(r"\[(\d+|\*)\]")


class PathError(InputError):
    """A path that cannot be parsed, or that does not fit a dataset's features."""


class RowError(InputError):
    """A row whose value at a path is missing or of the wrong type (the row is malformed, not the manifest)."""


class MissingColumn(RowError):
    """A row of your pairs file without a column the mapping reads (a JSON line without the key)."""


@dataclass(frozen=True)
class FieldPath:
    text: str
    steps: tuple[str | int, ...]  # str: struct/column key, int: list index, "*" marks a map over a list

    @property
    def column(self) -> str:
        return self.steps[0]  # type: ignore[return-value]

    @classmethod
    def parse(cls, text: str) -> FieldPath:
        steps: list[str | int] = []
        if not isinstance(text, str) or not text:
            raise PathError(f"expected a field path such as 'anchor' or 'set.pos[0]', got {text!r}")
        for segment in text.split("."):
            match = _SEGMENT.match(segment)
            if not match:
                raise PathError(f"bad field path {text!r}: cannot parse {segment!r}")
            steps.append(match.group(1))
            for index in _INDEX.findall(match.group(2)):
                steps.append("*" if index == "*" else int(index))
        # "*" is spelled as a str step too, so keep keys and the map marker apart: keys never equal "*".
        return cls(text=text, steps=tuple(steps))

    def check_features(self, features: dict) -> None:
        """Raise PathError if the dataset's features show this path cannot exist (unknown column or key)."""
        node: Any = features
        for step in self.steps:
            if isinstance(step, str) and step != "*":
                if isinstance(node, dict):
                    if step not in node:
                        raise PathError(f"{self.text!r}: no field {step!r}; available: {sorted(node)}")
                    node = node[step]
                elif hasattr(node, "feature"):  # a list of structs read by key: `[*]` is required
                    raise PathError(f"{self.text!r}: {step!r} reads into a list; write [*] or [n] first")
                else:
                    return  # features do not describe deeper structure; rows are checked one by one
            else:
                if not hasattr(node, "feature") and not isinstance(node, list):
                    raise PathError(f"{self.text!r}: indexes a field that is not a list")
                node = node[0] if isinstance(node, list) else node.feature

    def extract(self, row: dict) -> Any:
        return _walk(row, self.steps, self.text)

    def extract_from_column(self, value: Any) -> Any:
        """Apply the path to a value already taken from its column (batched reading)."""
        return _walk(value, self.steps[1:], self.text)


def _walk(value: Any, steps: tuple, text: str) -> Any:
    for position, step in enumerate(steps):
        if step == "*":
            if not isinstance(value, list):
                raise RowError(f"{text}: expected a list, got {type(value).__name__}")
            return [_walk(item, steps[position + 1 :], text) for item in value]
        if isinstance(step, int):
            if not isinstance(value, list) or step >= len(value):
                raise RowError(f"{text}: no element [{step}]")
            value = value[step]
        else:
            if not isinstance(value, dict) or step not in value:
                raise RowError(f"{text}: no field {step!r}")
            value = value[step]
    return value
