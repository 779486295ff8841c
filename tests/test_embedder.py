"""Loading an embedder: a model directory must bring its own working tokenizer, and the model fingerprint
covers the tokenizer, so an index built with one model refuses queries embedded by another."""

import json
import shutil

import pytest

from neoembed.embedder import EmbedderError, load_embedder, model_fingerprint

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


@pytest.fixture
def minilm_copy(tmp_path, minilm_path):
    copy = tmp_path / "minilm"
    shutil.copytree(minilm_path, copy)
    return copy


@pytest.mark.faults
def test_a_model_without_its_tokenizer_files_is_refused(minilm_copy):
    """transformers would build a 5-token stand-in that maps every word to [UNK]: unrelated texts then
    embed alike (cosine 0.985 was measured) and the server answered 200."""
    for name in TOKENIZER_FILES:
        (minilm_copy / name).unlink()
    with pytest.raises(EmbedderError, match=r"tokenizer has 5 tokens but the model embeds 30,522"):
        load_embedder(str(minilm_copy))


@pytest.mark.faults
def test_a_tokenizer_that_knows_no_english_words_is_refused(minilm_copy):
    spec = json.loads((minilm_copy / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    # The same number of tokens, but every word piece renamed: a plain sentence is all [UNK].
    spec["model"]["vocab"] = {
        (k if k.startswith("[") else f"zz{i}"): i
        for i, (k, _) in enumerate(sorted(vocab.items(), key=lambda kv: kv[1]))
    }
    (minilm_copy / "tokenizer.json").write_text(json.dumps(spec))
    (minilm_copy / "vocab.txt").unlink()
    with pytest.raises(
        EmbedderError, match=r"maps most words of a plain English sentence to the unknown token"
    ):
        load_embedder(str(minilm_copy))


@pytest.mark.faults
def test_the_fingerprint_covers_the_tokenizer(minilm_copy, minilm_path):
    config = json.loads((minilm_copy / "tokenizer_config.json").read_text())
    config["do_lower_case"] = False  # same weights, another tokenizer: cased text embeds differently
    (minilm_copy / "tokenizer_config.json").write_text(json.dumps(config))
    original, changed = load_embedder(str(minilm_path)), load_embedder(str(minilm_copy))
    assert model_fingerprint(original) == model_fingerprint(load_embedder(str(minilm_path)))
    assert model_fingerprint(original) != model_fingerprint(changed)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "the model name is empty"),
        ("  ", "the model name is empty"),
        ("./no-such-model", "'./no-such-model': no such directory"),
        ("/no/such/model", "'/no/such/model': no such directory"),
    ],
)
def test_an_empty_name_or_a_missing_path_is_named_before_any_hub_lookup(name, message):
    with pytest.raises(EmbedderError, match=message):
        load_embedder(name)
