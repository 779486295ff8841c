"""Linux manual pages as offline English pairs: a page's one-line NAME summary -> the opening of its DESCRIPTION.

Debian's `manpages` (sections 1, 4-8: devices, file formats, overviews, conventions) and `manpages-dev`
(sections 2 and 3: system calls and C library functions) hold about 2,500 pages written by the Linux
man-pages project: technical prose of another style than WordNet's glosses, from a mirror that a machine with
no model or dataset hub reaches. Each package is unpacked into the cache (`debian.package_dir`), never read from
/usr/share/man, which mixes every installed package's pages: the set of pages is the package's, the same on
every machine.

The pages are roff (the man macros). Hand-written here because no Python package renders man pages, and
`man`/`groff` take about 50 ms a page and are not on every machine: only the NAME line and the first
paragraphs of DESCRIPTION are needed, and those use a handful of font macros and escapes.
"""

from __future__ import annotations

import functools
import gzip
import re
from dataclasses import dataclass
from pathlib import Path

from neoembed.data.debian import package_dir

PACKAGES = {"manpages": "NEOEMBED_MANPAGES_DIR", "manpages-dev": "NEOEMBED_MANPAGES_DEV_DIR"}
DESCRIPTION_CHARS = 600  # paragraphs of DESCRIPTION are taken until the positive has at least ~this many
MIN_SUMMARY_CHARS = 8

# Font macros: their arguments are the text, joined without spaces for the alternating ones (`.BR open ()`).
_ALTERNATING = {".BR", ".RB", ".BI", ".IB", ".IR", ".RI"}
_FONT = {".B", ".I", ".SM", ".SB"}
_DISPLAY_START, _DISPLAY_END = {".nf", ".EX", ".TS"}, {".fi", ".EE", ".TE"}
_PARAGRAPH = {".PP", ".P", ".LP", ".TP", ".IP", ".HP", ".SS", ".sp"}
_NAMED = {"em": "-", "en": "-", "aq": "'", "dq": '"', "lq": '"', "rq": '"', "oq": "'", "cq": "'",
          "mu": "x", "bu": "*", "co": "(c)", "rg": "(R)", "tm": "(TM)", "ti": "~", "ha": "^", "ga": "`",
          "rs": "\\", "at": "@", "sh": "#", "Do": "$", "lh": "", "rh": ""}  # fmt: skip
_ESCAPE = re.compile(r"\\(\((..)|\[([^\]]*)\]|\*(\(..|\[[^\]]*\]|.)|f(\(..|\[[^\]]*\]|.)|(.))")


@dataclass(frozen=True)
class Page:
    name: str  # e.g. "open(2)"
    package: str
    summary: str  # the NAME line after its dash: "open and possibly create a file"
    description: str  # the opening paragraphs of DESCRIPTION, plain text


def _has_pages(path: Path) -> bool:
    return path.is_dir() and any(path.glob("man*/*.gz"))


def package_pages_dir(package: str) -> Path:
    """The man directory of `package` ($NEOEMBED_MANPAGES[_DEV]_DIR, or the cache filled from the mirror)."""
    return package_dir(
        package, "usr/share/man", _has_pages, PACKAGES[package], f"manpages/{package}", system=False
    )


def _unescape(text: str) -> str:
    def one(match: re.Match) -> str:
        named, bracket, _string, _font, single = match.group(2, 3, 4, 5, 6)
        if named is not None:
            return _NAMED.get(named, "")
        if bracket is not None:
            return _NAMED.get(bracket, "")
        if single is not None:
            return {"-": "-", "e": "\\", " ": " ", "~": " ", "0": " ", "|": "", "^": "", "&": "", "%": "",
                    "c": "", "\n": ""}.get(single, single)  # fmt: skip
        return ""  # font changes and strings

    return _ESCAPE.sub(one, text)


def _arguments(line: str) -> list[str]:
    """A macro line's arguments, roff-style: space-separated, double quotes group."""
    return [quoted or bare for quoted, bare in re.findall(r'"([^"]*)"|(\S+)', line)]


def _text_of(line: str) -> str | None:
    """The running text a roff line contributes; None for a paragraph break; "" for a line that adds nothing."""
    if not line.startswith((".", "'")):
        return _unescape(line)
    macro, _, rest = line.partition(" ")
    if macro in _PARAGRAPH:
        return None
    if macro in _ALTERNATING:
        return _unescape("".join(_arguments(rest)))
    if macro in _FONT:
        return _unescape(" ".join(_arguments(rest)))
    return ""  # layout requests, comments (.\"), and macros that carry no running text


def _sections(lines: list[str]) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line.startswith(".SH"):
            current = " ".join(_arguments(line[3:])).upper()
            sections.setdefault(current, [])
        elif current is not None:
            sections[current].append(line)
    return sections


def _paragraphs(lines: list[str]) -> list[str]:
    """Running text split at paragraph macros; displays of code or tables (.nf/.EX/.TS ... .fi/.EE/.TE) are
    left out: they are not prose."""
    paragraphs: list[str] = []
    words: list[str] = []
    display = False
    for line in lines:
        macro = line.split(" ", 1)[0]
        if macro in _DISPLAY_START or macro in _DISPLAY_END:
            display = macro in _DISPLAY_START
            text = None
        else:
            text = "" if display else _text_of(line)
        if text is None:
            if words:
                paragraphs.append(" ".join(words))
            words = []
        elif text.strip():
            words.append(text.strip())
    if words:
        paragraphs.append(" ".join(words))
    return [re.sub(r"\s+", " ", p).strip() for p in paragraphs]


def parse_page(source: str, name: str, package: str) -> Page | None:
    """A page's NAME summary and DESCRIPTION opening; None for a redirect (`.so`) or a page lacking either."""
    lines = source.splitlines()
    if any(line.startswith(".so ") for line in lines[:3]):
        return None
    sections = _sections(lines)
    heading = " ".join(_paragraphs(sections.get("NAME", [])))
    _, dash, summary = heading.partition(" - ")
    description = ""
    for paragraph in _paragraphs(sections.get("DESCRIPTION", [])):
        if len(description) >= DESCRIPTION_CHARS:
            break
        description = f"{description} {paragraph}".strip()
    summary = summary.strip()
    if not dash or len(summary) < MIN_SUMMARY_CHARS or not description:
        return None
    return Page(name, package, summary, description)


@functools.cache
def load_pages() -> tuple[Page, ...]:
    """Every page of both packages with a summary and a description, in package and file order; one page per
    summary (the first)."""
    pages, seen = [], set()
    for package in PACKAGES:
        root = package_pages_dir(package)
        for path in sorted(root.glob("man*/*.gz")):
            name = re.sub(r"\.(\w+)\.gz$", r"(\1)", path.name)
            page = parse_page(gzip.decompress(path.read_bytes()).decode("utf-8", "replace"), name, package)
            if page is not None and page.summary.casefold() not in seen:
                seen.add(page.summary.casefold())
                pages.append(page)
    return tuple(pages)


def manpages_retrieval(n_queries: int = 500, n_corpus: int | None = None) -> tuple[dict, dict, dict]:
    """A page's NAME summary -> its description, among the descriptions of the first `n_corpus` pages (None:
    all), in the pages' fixed order, so smaller sets are prefixes of larger ones."""
    pages = load_pages()[:n_corpus]
    queries = {f"q{i}": page.summary for i, page in enumerate(pages[:n_queries])}
    corpus = {f"m{i}": page.description for i, page in enumerate(pages)}
    return queries, corpus, {f"q{i}": {f"m{i}"} for i in range(len(queries))}
