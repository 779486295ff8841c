"""dictd databases, the format of Debian's `dict-*` dictionaries (FOLDOC, the Jargon File): each entry's text.

A database `<name>` is `<name>.index`, lines `headword<TAB>offset<TAB>length` (offset and length in dictd's
base64 digits), into `<name>.dict.dz`, the entries' text gzip-compressed (dictzip, whose random-access table
plain gzip ignores: the file is read whole). Headwords beginning `00` (`00-database-info`, `-url`, ...) are
the database's own notes, not entries. What an entry's text holds past that is each dictionary's own markup,
read by its module; a definition taken from it is cut alike in every one (`MAX_WORDS`, `MIN_WORDS`).
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

from neoembed.data.debian import package_dir
from neoembed.errors import InputError

PACKAGE_FILES = "usr/share/dictd"  # where a dict-* package installs its databases
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
MAX_WORDS = 64  # a definition is its first paragraph, cut to this many words (one screenful, ~100 tokens)
MIN_WORDS = 6  # shorter bodies are mostly cross-references ("See {dash}"), not definitions


def has_database(path: Path, name: str) -> bool:
    return (path / f"{name}.index").is_file() and (path / f"{name}.dict.dz").is_file()


def database_dir(package: str, name: str, env_var: str) -> Path:
    """The directory holding database `name` of Debian's `package`: $`env_var`, /usr/share/dictd, or
    ~/.cache/neoembed/`name` filled from the Debian mirror."""
    return package_dir(package, PACKAGE_FILES, lambda path: has_database(path, name), env_var, name)


def _b64(digits: str) -> int:
    value = 0
    for digit in digits:
        value = value * 64 + _B64.index(digit)
    return value


def entry_texts(path: Path, name: str) -> list[str]:
    """The text of each entry of database `name` in directory `path`, in file order, once however many
    headwords the index names it under."""
    dz, index = path / f"{name}.dict.dz", path / f"{name}.index"
    try:
        data = gzip.decompress(dz.read_bytes())
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise InputError(f"{dz}: not a whole gzip (dictzip) file: {error}") from None
    spans = set()
    for number, line in enumerate(index.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        fields = line.split("\t")
        if len(fields) == 3 and not fields[0].startswith("00"):
            try:
                spans.add((_b64(fields[1]), _b64(fields[2])))
            except ValueError:
                raise InputError(f"{index}:{number}: offset or length not in dictd's base64 digits") from None
    return [
        data[offset : offset + length].decode("utf-8", errors="replace") for offset, length in sorted(spans)
    ]


def paragraphs(body: str) -> list[str]:
    """The paragraphs of an entry's body (separated by blank lines), empty ones left out."""
    return [p for p in re.split(r"\n\s*\n", body.strip()) if p.strip()]


def cut(text: str) -> str:
    """`text` with its whitespace collapsed, cut to MAX_WORDS words."""
    return " ".join(text.split()[:MAX_WORDS])
