"""A from-scratch NeoBERT's word embeddings taken from a teacher embedder (`model.embeddings_from`)."""

import pytest
import torch
import torch.nn.functional as F

from neoembed.pretrain.neobert.tokenizer import load_tokenizer
from neoembed.pretrain.settings import PretrainSettings
from neoembed.pretrain.train import build_model
from neoembed.recipes import RecipeError

CONFIG = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}


def settings(**model) -> PretrainSettings:
    return PretrainSettings.model_validate(
        {"corpus": {"wordnet": True}, "model": {"config": CONFIG, **model}, "data": {"max_length": 64}}
    )


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(None)


def test_teacher_initialised_word_embeddings_place_related_words_together(tokenizer):
    model = build_model(settings(embeddings_from="minilm"), tokenizer)
    table = model.get_input_embeddings().weight

    def similarity(a: str, b: str) -> float:
        ids = tokenizer.convert_tokens_to_ids([a, b])
        return F.cosine_similarity(table[ids[0]], table[ids[1]], dim=0).item()

    assert similarity("king", "queen") > similarity("king", "carrot") + 0.2
    assert similarity("car", "truck") > similarity("car", "poem") + 0.2
    random = build_model(settings(), tokenizer).get_input_embeddings().weight
    assert not torch.equal(table, random)


def test_embeddings_from_refuses_what_it_cannot_initialise(tokenizer, tmp_path):
    with pytest.raises(RecipeError, match="model.embeddings_from"):
        build_model(settings(embeddings_from="minilm", init_from=str(tmp_path)), tokenizer)
    wide = PretrainSettings.model_validate(
        {
            "corpus": {"wordnet": True},
            "model": {"config": {**CONFIG, "hidden_size": 512}, "embeddings_from": "minilm"},
        }
    )
    with pytest.raises(RecipeError, match="384-dimensional"):
        build_model(wide, tokenizer)
