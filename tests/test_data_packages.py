"""Debian's package descriptions as pairs: the mirror's Translation-en index read into (synopsis, opening
paragraphs), one pair per family of packages; the file downloaded once into the cache (or given), a truncated
or damaged one refused; the pairs built as a source and served as a retrieval set."""

import functools
import hashlib
import http.server
import json
import lzma
import socket
import threading
from pathlib import Path

import pytest
from data_source_fixtures import TRANSLATION_EN, write_translation

from neoembed.data.debian import PackageDataError
from neoembed.data.packages import (
    DESCRIPTION_CHARS,
    FILE_ENV,
    INDEX,
    MIRROR_ENV,
    index_file,
    load_descriptions,
    packages_retrieval,
    parse_description,
    parse_index,
    read_index,
)

REPO = Path(__file__).resolve().parents[1]


def test_a_description_reads_as_its_synopsis_and_its_opening_paragraphs_in_plain_text():
    field = (
        "Open Free Fiasco Firmware Flasher\n"
        "The 0xFFFF utility implements a free\n"
        "userspace handler.\n"
        ".\n"
        "Supported operations:\n"
        " * generating FIASCO images\n"
        " * editing   Maemo firmware"
    )
    d = parse_description("0xffff", field)
    assert d.synopsis == "Open Free Fiasco Firmware Flasher"
    assert d.opening == "The 0xFFFF utility implements a free userspace handler."
    assert d.description == (
        "The 0xFFFF utility implements a free userspace handler. Supported operations: * generating FIASCO "
        "images * editing Maemo firmware"
    )


def test_long_descriptions_stop_after_the_paragraph_that_reaches_the_length():
    field = "A synopsis line\n" + "word " * (DESCRIPTION_CHARS // 5) + "\n.\nA second.\n.\nNot read."
    d = parse_description("p", field)
    assert d.description.endswith("A second.") and "Not read" not in d.description
    field = "A synopsis line\n" + "word " * DESCRIPTION_CHARS + "\n.\nA second."
    assert parse_description("p", field).description.endswith("word")


@pytest.mark.parametrize(
    "field",
    [
        "short\nA synopsis under eight characters makes no query worth training on.",
        "A synopsis line\nToo short a description.",
        "A synopsis line\n.\n.",
        "A synopsis line",
    ],
    ids=["short-synopsis", "short-description", "only-breaks", "no-description"],
)
def test_descriptions_too_short_for_a_pair_are_skipped(field):
    assert parse_description("p", field) is None


def test_the_index_gives_one_pair_per_synopsis_and_per_opening_paragraph():
    pairs = {d.package: d for d in parse_index(TRANSLATION_EN)}
    # 0ad-data shares 0ad's opening paragraph: the shorter name speaks for the family. afl-clang and minisat2
    # share a synopsis: minisat2 (the shorter name) is kept. node-foo's description and tiny's synopsis are
    # too short.
    assert set(pairs) == {"0ad", "0xffff", "minisat2"}
    assert pairs["0ad"].synopsis == "Real-time strategy game of ancient warfare"
    assert pairs["0ad"].description.startswith('0 A.D. (pronounced "zero ey-dee") is a free')
    assert pairs["0xffff"].description.endswith("* editing Maemo firmware packages")


def test_the_order_is_fixed_by_package_name_not_by_the_file():
    stanzas = TRANSLATION_EN.split("\n\n")
    assert parse_index("\n\n".join(reversed(stanzas))) == parse_index(TRANSLATION_EN)


def test_the_file_named_by_the_environment_is_read_compressed_or_not(tmp_path, monkeypatch):
    xz = write_translation(tmp_path / "Translation-en.xz")
    plain = write_translation(tmp_path / "Translation-en", compress=False)
    monkeypatch.setenv(MIRROR_ENV, "http://127.0.0.1:9")  # never reached
    monkeypatch.setenv("NEOEMBED_CACHE", str(tmp_path / "cache"))
    for path in (xz, plain):
        monkeypatch.setenv(FILE_ENV, str(path))
        assert index_file() == path
        assert [d.package for d in load_descriptions()] == [d.package for d in parse_index(TRANSLATION_EN)]
    assert not (tmp_path / "cache").exists()
    monkeypatch.setenv(FILE_ENV, str(tmp_path / "missing"))
    with pytest.raises(PackageDataError, match=f"{FILE_ENV}=.*missing is not a file"):
        index_file()


@pytest.fixture
def mirror(tmp_path):
    """A Debian mirror on a loopback port serving the fixture index at its real path; `.requests` counts
    the files it served."""
    root = tmp_path / "mirror"
    write_translation(root / INDEX)
    served = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            served.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=root))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.root, server.requests = root, served
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.delenv(FILE_ENV, raising=False)
    monkeypatch.setenv("NEOEMBED_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "packages" / "bookworm"


def test_the_index_is_downloaded_once_into_the_cache_with_its_sha256(mirror, cache, monkeypatch):
    monkeypatch.setenv(MIRROR_ENV, mirror.url + "/")
    path = index_file()
    assert path == cache / "Translation-en.xz" and mirror.requests == [f"/{INDEX}"]
    assert path.read_bytes() == (mirror.root / INDEX).read_bytes()
    assert (cache / "Translation-en.xz.sha256").read_text().strip() == hashlib.sha256(
        path.read_bytes()
    ).hexdigest()
    assert [d.package for d in load_descriptions()] == [d.package for d in parse_index(TRANSLATION_EN)]
    assert index_file() == path and len(mirror.requests) == 1  # read from the cache from now on
    assert sorted(p.name for p in cache.iterdir()) == ["Translation-en.xz", "Translation-en.xz.sha256"]


def test_a_file_url_mirror_works_too(tmp_path, cache, monkeypatch):
    write_translation(tmp_path / "local-mirror" / INDEX)
    monkeypatch.setenv(MIRROR_ENV, (tmp_path / "local-mirror").as_uri())
    assert index_file().read_bytes() == (tmp_path / "local-mirror" / INDEX).read_bytes()


def test_an_unreachable_mirror_is_one_line_naming_the_url_and_the_way_around(cache, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(MIRROR_ENV, f"http://127.0.0.1:{port}")
    with pytest.raises(PackageDataError) as err:
        index_file()
    message = str(err.value)
    assert "\n" not in message and f"http://127.0.0.1:{port}/{INDEX}" in message
    assert MIRROR_ENV in message and FILE_ENV in message
    assert not cache.exists() or not any(cache.iterdir())  # no partial file left behind


def test_a_truncated_download_is_refused_and_nothing_is_cached(mirror, cache, monkeypatch):
    served = mirror.root / INDEX
    served.write_bytes(served.read_bytes()[:-40])  # the server says the truncated size: only xz can tell
    monkeypatch.setenv(MIRROR_ENV, mirror.url)
    with pytest.raises(PackageDataError) as err:
        index_file()
    message = str(err.value)
    assert "\n" not in message and f"{mirror.url}/{INDEX} (as downloaded)" in message
    assert "truncated or damaged" in message and "nothing was cached" in message
    assert not any(cache.iterdir())


def test_a_page_that_is_not_xz_is_refused_too(mirror, cache, monkeypatch):
    (mirror.root / INDEX).write_text("<html>captive portal</html>")
    monkeypatch.setenv(MIRROR_ENV, mirror.url)
    with pytest.raises(PackageDataError, match="not a complete xz file"):
        index_file()


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_given_file_is_refused_in_one_line_naming_it(tmp_path, monkeypatch, damage):
    data = bytearray(lzma.compress(TRANSLATION_EN.encode(), format=lzma.FORMAT_XZ))
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    path = tmp_path / "Translation-en.xz"
    path.write_bytes(bytes(data))
    monkeypatch.setenv(FILE_ENV, str(path))
    with pytest.raises(PackageDataError) as err:
        load_descriptions()
    assert "\n" not in str(err.value) and str(err.value).startswith(f"{path}: not a complete xz file")
    with pytest.raises(PackageDataError):
        read_index(path)


def test_a_cached_file_that_changed_after_its_download_is_refused(mirror, cache, monkeypatch):
    monkeypatch.setenv(MIRROR_ENV, mirror.url)
    path = index_file()
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(PackageDataError, match=f"{path} does not match the sha256 recorded beside it"):
        index_file()


def test_the_source_builds_and_serves_as_a_retrieval_set(tmp_path, monkeypatch):
    from neoembed.data import BuildConfig, build, load_records

    monkeypatch.setenv(FILE_ENV, str(write_translation(tmp_path / "Translation-en.xz")))
    expected = parse_index(TRANSLATION_EN)
    queries, corpus, relevant = packages_retrieval(n_queries=2)
    assert list(queries.values()) == [d.synopsis for d in expected[:2]]
    assert list(corpus.values()) == [d.description for d in expected]
    assert relevant == {"q0": {"p0"}, "q1": {"p1"}}
    assert packages_retrieval(n_queries=1, n_corpus=2)[1] == dict(list(corpus.items())[:2])  # a prefix
    result = build(BuildConfig(out=tmp_path / "out", sources=("packages",), mine=False))
    rows = load_records(tmp_path / "out", ["packages"])["packages"]
    assert rows["query"] == [d.synopsis for d in expected] and result.rows_out == len(expected)
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["sources"]["packages"]["rows_out"] == len(expected)


@pytest.mark.slow
def test_the_real_index_gives_the_manifests_row_count():
    """The mirror's bookworm index (downloaded into the cache on first use, 6.1 MB): as many pairs as the
    manifest says."""
    from neoembed.data.manifest import load_manifest

    manifest, _ = load_manifest(REPO / "data_manifests" / "packages.yaml")
    pairs = load_descriptions()
    assert len(pairs) == manifest.expected_rows
    assert "Real-time strategy game of ancient warfare" in {d.synopsis for d in pairs}


def test_packages_is_a_held_out_and_selection_set_kind(tmp_path, monkeypatch):
    from neoembed.contrastive.evaluation import prompt_source, retrieval_set
    from neoembed.contrastive.settings import EvalSettings, SelectionSettings

    monkeypatch.setenv(FILE_ENV, str(write_translation(tmp_path / "Translation-en.xz")))
    (spec,) = EvalSettings.model_validate({"sets": ["packages"]}).sets
    assert retrieval_set(spec.model_copy(update={"queries": 2})) == packages_retrieval(n_queries=2)
    assert prompt_source(spec) == "packages"  # scored with the prompts training gives the source
    assert SelectionSettings.model_validate({"general": ["packages"]}).general[0].label == "packages"
