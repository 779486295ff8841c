"""Manual pages as pairs: the roff a page is written in, read into its NAME summary and DESCRIPTION opening;
and the real packages, built as a source and scored as a selection or held-out set."""

import json

import pytest

from neoembed.data.manpages import DESCRIPTION_CHARS, parse_page

PAGE = r""".\" Copyright (c) 2010 by someone
.TH OPEN 2 2023-02-05 "Linux man-pages 6.03"
.SH NAME
open, openat, creat \- open and possibly create a file
.SH LIBRARY
Standard C library
.SH SYNOPSIS
.nf
.B #include <fcntl.h>
.fi
.SH DESCRIPTION
The
.BR open ()
system call opens the file specified by
.IR pathname .
If it does not exist, it may optionally (if
.B O_CREAT
is specified in
.IR flags )
be created\(emthe \fIfile\fP \(lqcreated\(rq.
.PP
The structure is:
.PP
.in +4n
.EX
struct stat { int st_mode; };
.EE
.in
.PP
A second paragraph.
.SH RETURN VALUE
Never read.
"""


def test_a_page_reads_as_its_summary_and_the_prose_of_its_description():
    page = parse_page(PAGE, "open(2)", "manpages-dev")
    assert page.summary == "open and possibly create a file"
    assert page.description == (
        "The open() system call opens the file specified by pathname. If it does not exist, it may optionally "
        '(if O_CREAT is specified in flags) be created-the file "created". The structure is: A second paragraph.'
    )
    assert "struct stat" not in page.description and "Never read" not in page.description


def test_long_descriptions_stop_after_the_paragraph_that_reaches_the_length():
    long = PAGE.replace("A second paragraph.", "word " * DESCRIPTION_CHARS + "\n.PP\nA third paragraph.")
    page = parse_page(long, "open(2)", "manpages-dev")
    assert page.description.endswith("word") and "third" not in page.description


@pytest.mark.parametrize(
    "source",
    [
        ".so man2/open.2\n",  # a redirect to another page
        PAGE.replace(r"\- open and possibly create a file", "no dash here"),
        PAGE.replace(".SH DESCRIPTION", ".SH OVERVIEW"),
    ],
    ids=["redirect", "no-summary", "no-description"],
)
def test_pages_without_a_summary_and_a_description_are_skipped(source):
    assert parse_page(source, "x(1)", "manpages") is None


def test_the_real_packages_build_as_a_source_and_serve_as_a_retrieval_set(tmp_path):
    """Debian's manpages and manpages-dev (from the cache, filled from the mirror on first use): about a
    thousand pairs, a build of them, and the retrieval set `export.selection` scores by default."""
    from neoembed.data import BuildConfig, build, load_records, manpages_retrieval

    queries, corpus, relevant = manpages_retrieval(n_queries=50)
    assert len(queries) == 50 and len(corpus) > 1000 and all(len(r) == 1 for r in relevant.values())
    result = build(BuildConfig(out=tmp_path / "out", sources=("manpages",), mine=False))
    rows = load_records(tmp_path / "out", ["manpages"])["manpages"]
    assert len(rows) > 1000 and result.rows_out == len(rows)
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["sources"]["manpages"]["rows_out"] == len(rows)
    assert "open and possibly create a file" in rows["query"]
