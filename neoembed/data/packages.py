"""Debian's package descriptions as offline English pairs: a package's one-line synopsis -> the opening of its
long description.

The mirror's English description index (`dists/bookworm/main/i18n/Translation-en.xz`, 6.1 MB, 63,956
stanzas) holds every main package's description, written by its maintainer: plain prose about what a program
or library does, of every field, in another style than WordNet's glosses or the manual pages. The file is
downloaded once into the cache (`$NEOEMBED_PACKAGES_FILE` points at a local copy instead) from the mirror
`$NEOEMBED_DEBIAN_MIRROR` (default deb.debian.org), which a machine with no model or dataset hub reaches.

The file is a run of deb822 stanzas (`Package:`, `Description-md5:`, `Description-en:` and its continuation
lines). Read by hand: python-apt, which parses apt's files, is not on PyPI, and python-debian is not a
dependency; the few rules needed (Debian Policy 5.6.13, the Description field) are the ones below.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import lzma
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from neoembed.cache import cache_root
from neoembed.data.debian import PackageDataError
from neoembed.run_files import temp_path, write_text

MIRROR_ENV, DEFAULT_MIRROR = "NEOEMBED_DEBIAN_MIRROR", "http://deb.debian.org/debian"
FILE_ENV = "NEOEMBED_PACKAGES_FILE"
SUITE = "bookworm"
INDEX = f"dists/{SUITE}/main/i18n/Translation-en.xz"
DESCRIPTION_CHARS = 600  # paragraphs of the long description are taken until the positive has ~this many
MIN_SYNOPSIS_CHARS = 8
MIN_DESCRIPTION_CHARS = 60  # shorter long descriptions are stubs ("Transitional package.", "Dummy package.")
TIMEOUT_S = 60
RETRY = f"try again, set {MIRROR_ENV} to another Debian mirror, or point {FILE_ENV} at a copy of the file"
_XZ_MAGIC = b"\xfd7zXZ\x00"


@dataclass(frozen=True)
class Description:
    package: str  # e.g. "0ad"
    synopsis: str  # the first line of Description-en: "Real-time strategy game of ancient warfare"
    description: str  # the opening paragraphs of the long description, plain text
    opening: str  # its first paragraph, which the packages built from one source mostly share


def index_url() -> str:
    """Where the mirror serves the English description index ($NEOEMBED_DEBIAN_MIRROR or deb.debian.org)."""
    return f"{(os.environ.get(MIRROR_ENV) or DEFAULT_MIRROR).rstrip('/')}/{INDEX}"


def index_file() -> Path:
    """The description index: $NEOEMBED_PACKAGES_FILE (Translation-en, xz-compressed or not), or the cache's
    copy, downloaded from the mirror on first use and checked against the sha256 recorded beside it."""
    override = os.environ.get(FILE_ENV)
    if override:
        if not Path(override).is_file():
            raise PackageDataError(
                f"{FILE_ENV}={override} is not a file (a Debian Translation-en(.xz) index)"
            )
        return Path(override)
    path = cache_root() / "packages" / SUITE / "Translation-en.xz"
    recorded = _sha_file(path)
    if not (path.is_file() and recorded.is_file()):
        download(index_url(), path)
    elif _sha256(path) != recorded.read_text().strip():
        raise PackageDataError(
            f"{path} does not match the sha256 recorded beside it when it was downloaded (changed or damaged): "
            "delete it to download it again"
        )
    return path


def _sha_file(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()  # 6 MB: read whole (file_digest needs Python 3.11)


def download(url: str, path: Path) -> None:
    """`url` into `path` through a temporary sibling and a rename, once the whole file has arrived and
    decompresses to its end; its sha256 is written beside it first (`<path>.sha256`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response, tmp.open("wb") as out:
            size = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(
                total=size, unit="B", unit_scale=True, desc=f"downloading {url.rsplit('/', 1)[-1]}"
            ) as bar:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
                    bar.update(len(chunk))
        if size is not None and tmp.stat().st_size != size:
            raise PackageDataError(
                f"{url}: got {tmp.stat().st_size:,} of {size:,} bytes, an interrupted download; nothing was "
                f"cached: {RETRY}"
            )
        # a truncated or damaged download is refused here, never cached
        read_index(tmp, f"{url} (as downloaded)", remedy=f"; nothing was cached: {RETRY}", xz=True)
        write_text(_sha_file(path), _sha256(tmp) + "\n")
        os.replace(tmp, path)
    except (OSError, http.client.HTTPException) as err:  # urllib's URLError is an OSError
        reason = getattr(err, "reason", None) or err
        raise PackageDataError(
            f"Debian's package descriptions not found, and downloading {url} into {path} failed: {reason}; "
            f"{RETRY}"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)


def read_index(path: Path, name: str | None = None, remedy: str = "", xz: bool | None = None) -> str:
    """The text of a Translation-en index, decompressed if it is xz (`xz`: None, by its first bytes); a
    truncated or damaged xz file (its end or a checksum wrong) is refused in one line naming it (`name`, else
    the path) and saying what to do (`remedy`)."""
    data = Path(path).read_bytes()
    name = name or str(path)
    if xz is None:
        xz = data.startswith(_XZ_MAGIC)
    if xz:
        try:
            if not data.startswith(_XZ_MAGIC):
                raise lzma.LZMAError("no xz header")
            data = lzma.decompress(data, format=lzma.FORMAT_XZ)
        except (lzma.LZMAError, EOFError) as err:
            raise PackageDataError(
                f"{name}: not a complete xz file, truncated or damaged ({err}){remedy}"
            ) from None
    return data.decode("utf-8", "replace")


def _stanzas(text: str):
    """Each stanza's fields, {name: value}; a multi-line value keeps its continuation lines (first space
    removed) after a newline."""
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        name = None
        for line in block.splitlines():
            if line[:1] in (" ", "\t"):
                if name is not None:
                    fields[name] += "\n" + line[1:]
            elif ":" in line:
                name, _, value = line.partition(":")
                fields[name] = value.strip()
        if fields:
            yield fields


def _paragraphs(lines: list[str]) -> list[str]:
    """The long description's paragraphs as plain text: a line "." is a blank line (a paragraph break);
    verbatim lines (a second leading space: lists, mostly) join the running text like the others."""
    paragraphs: list[str] = []
    words: list[str] = []
    for line in [*lines, "."]:
        if line.strip() == ".":
            if words:
                paragraphs.append(" ".join(words))
            words = []
        else:
            words.extend(line.split())
    return paragraphs


def parse_description(package: str, field: str) -> Description | None:
    """A `Description-en` value as (synopsis, opening paragraphs); None for a synopsis or long description too
    short to make a pair."""
    first, *rest = field.split("\n")
    synopsis = " ".join(first.split())
    paragraphs, description = _paragraphs(rest), ""
    for paragraph in paragraphs:
        if len(description) >= DESCRIPTION_CHARS:
            break
        description = f"{description} {paragraph}".strip()
    if len(synopsis) < MIN_SYNOPSIS_CHARS or len(description) < MIN_DESCRIPTION_CHARS:
        return None
    return Description(package, synopsis, description, paragraphs[0])


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


def parse_index(text: str) -> tuple[Description, ...]:
    """One pair per distinct synopsis and per distinct opening paragraph, in `sample_order`.

    The packages built from one source mostly share the opening paragraph (`0ad`, `0ad-data`,
    `0ad-data-common`) and add one of their own after it; pairs differing in that last sentence would be each
    other's false negatives, so the family gives one pair: the shortest package name's (then the first by
    name), usually the main package's. Among several packages with one synopsis ("Transitional package"),
    likewise one."""
    parsed = [
        d
        for fields in _stanzas(text)
        if "Package" in fields and "Description-en" in fields
        if (d := parse_description(fields["Package"], fields["Description-en"])) is not None
    ]
    kept, seen = [], set[tuple[str, str]]()
    for d in sorted(parsed, key=lambda d: (len(d.package), d.package)):
        keys = {("s", _key(d.synopsis)), ("d", _key(d.description)), ("o", _key(d.opening))}
        if keys.isdisjoint(seen):
            seen |= keys
            kept.append(d)
    return tuple(sample_order(kept))


def sample_order(descriptions: list[Description]) -> list[Description]:
    """A fixed pseudo-random order (a hash of the package name, the same on every machine and for every
    snapshot of the index): any prefix is a sample of the whole archive, not of the packages named a..."""
    return sorted(descriptions, key=lambda d: hashlib.sha256(d.package.encode()).digest())


@functools.cache
def _load(path: Path, size: int, mtime_ns: int) -> tuple[Description, ...]:
    return parse_index(read_index(path))


def load_descriptions() -> tuple[Description, ...]:
    """Every distinct pair of the index (`index_file`), in `sample_order`; parsed once per file."""
    path = index_file()
    stat = path.stat()
    return _load(path, stat.st_size, stat.st_mtime_ns)


def packages_retrieval(n_queries: int = 500, n_corpus: int = 2000) -> tuple[dict, dict, dict]:
    """A package's synopsis -> its description, among the descriptions of the first `n_corpus` pairs of the
    fixed `sample_order` (so smaller sets are prefixes of larger ones)."""
    pairs = load_descriptions()[:n_corpus]
    queries = {f"q{i}": d.synopsis for i, d in enumerate(pairs[:n_queries])}
    corpus = {f"p{i}": d.description for i, d in enumerate(pairs)}
    return queries, corpus, {f"q{i}": {f"p{i}"} for i in range(len(queries))}
