"""The shared WordNet reader: line parsing, directory resolution, held-out split."""

import pytest

from neoembed.data import debian, wordnet
from neoembed.data.wordnet import WordNetError, load_synsets, split_of, wordnet_dir

LICENCE = "  1 This software and database is being provided to you, the LICENSEE, by  \n"
ADJ = (
    "00001740 00 a 01 able 0 001 = 05200169 n 0000 | (usually followed by `to') having the necessary means; "
    '"able to swim"; "she was able to program her computer"  \n'
    "00003356 00 a 01 emerging 0 001 & 00003553 a 0000 | coming into being  \n"
    "00003553 00 s 02 emergent 0 galore(ip) 0 001 & 00003356 a 0000 | coming into existence  \n"
)
NOUN = (
    "00002137 03 n 02 abstraction 0 abstract_entity 0 001 ~ 00023280 n 0000 | a concept; " + '"an idea"  \n'
    "00023280 03 n 01 idea 0 002 @ 00002137 n 0000 @i 00009999 n 0000 | the content of cognition  \n"
)


@pytest.fixture
def wn_dir(tmp_path, monkeypatch):
    for pos, text in {"noun": NOUN, "verb": "", "adj": ADJ, "adv": ""}.items():
        (tmp_path / f"data.{pos}").write_text(LICENCE + text)
    monkeypatch.setenv("NEOEMBED_WORDNET_DIR", str(tmp_path))
    return tmp_path


def test_parses_lemmas_gloss_and_examples(wn_dir):
    assert wordnet_dir() == wn_dir
    by_id = {s.id: s for s in load_synsets()}
    assert set(by_id) == {"00002137-n", "00023280-n", "00001740-a", "00003356-a", "00003553-s"}
    able = by_id["00001740-a"]
    assert able.gloss == "(usually followed by `to') having the necessary means"
    assert able.examples == ("able to swim", "she was able to program her computer")
    assert by_id["00003553-s"].lemmas == ("emergent", "galore")  # adjective marker stripped
    assert by_id["00002137-n"].examples == ("an idea",)
    assert by_id["00002137-n"].lemmas == ("abstraction", "abstract entity")  # underscores -> spaces
    assert by_id["00003553-s"].examples == ()


def test_hypernym_and_similar_to_pointers_resolve_to_synset_ids(wn_dir):
    by_id = {s.id: s for s in load_synsets()}
    # `@` kept, `@i` to a synset this copy lacks dropped, `~` (hyponym) not kept: hyponymy is the inverse
    assert by_id["00023280-n"].hypernyms == ("00002137-n",)
    assert by_id["00002137-n"].hypernyms == ()
    # Pointers name adjective satellites with pos "a" too; the id keeps the synset's own type ("s")
    assert by_id["00003356-a"].similar == ("00003553-s",)
    assert by_id["00003553-s"].similar == ("00003356-a",)


def test_malformed_line_names_file_and_line(tmp_path):
    for pos in wordnet.POS_FILES:
        (tmp_path / f"data.{pos}").write_text("")
    (tmp_path / "data.verb").write_text(LICENCE + "00001740 29 v 05 breathe 0 | gloss\n")
    with pytest.raises(WordNetError, match=r"data\.verb:2"):
        load_synsets(tmp_path)


def test_override_without_data_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("NEOEMBED_WORDNET_DIR", str(tmp_path))
    with pytest.raises(WordNetError, match="NEOEMBED_WORDNET_DIR"):
        wordnet_dir()


def test_split_is_deterministic_and_about_ten_percent():
    ids = [f"{i:08d}-n" for i in range(20000)]
    held = [i for i in ids if split_of(i) == "heldout"]
    assert 0.09 < len(held) / len(ids) < 0.11
    assert held == [i for i in ids if split_of(i) == "heldout"]
    assert {split_of(i) for i in ids} == {"train", "heldout"}


def test_real_wordnet_matches_published_counts():
    """Installs Debian's wordnet-base into the cache where missing (seconds; needs the Debian mirror)."""
    synsets = load_synsets()
    assert len(synsets) == 117659
    assert sum(len(s.examples) for s in synsets) == 48339
    assert len({s.id for s in synsets}) == len(synsets)


def test_installs_wordnet_base_into_an_empty_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("NEOEMBED_WORDNET_DIR", raising=False)
    monkeypatch.setattr(debian, "SYSTEM_ROOT", tmp_path / "absent")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = wordnet_dir()
    assert path == tmp_path / "cache" / "neoembed" / "wordnet"
    assert (path / "data.noun").stat().st_size > 10_000_000
    assert wordnet_dir() == path  # second call finds the cache, installs nothing


def test_wordnet_source_reads_only_training_synsets():
    from pathlib import Path

    from neoembed.data.manifest import load_manifest
    from neoembed.data.sources import open_source

    manifest, _ = load_manifest(Path(__file__).resolve().parents[1] / "data_manifests" / "wordnet.yaml")
    rows = open_source(manifest)
    assert {split_of(s) for s in set(rows["synset"][:])} == {"train"}
    pairs = rows["pair"][:]
    train = [s for s in load_synsets() if split_of(s.id) == "train"]
    assert pairs.count("lemmas_gloss") == len(train)
    assert pairs.count("example_gloss") == sum(len(s.examples) for s in train)
    assert pairs.count("synonyms") == sum(len(s.lemmas) * (len(s.lemmas) - 1) // 2 for s in train)
    # A --max-rows prefix samples the whole of WordNet, not the top of the noun file.
    first = rows.select(range(5000))
    assert {s.rsplit("-", 1)[1] for s in first["synset"]} == {"n", "v", "a", "s", "r"}
    assert set(first["pair"]) == {"lemmas_gloss", "example_gloss", "synonyms"}
