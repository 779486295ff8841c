"""A NeoBERT directory is a sentence-transformers model once neoembed is imported."""

import torch

import neoembed  # noqa: F401  (registers NeoBERT with the Auto classes)
from neoembed.pretrain.neobert import NeoBERTModel, tiny_config
from neoembed.pretrain.neobert.tokenizer import load_tokenizer


def test_tokenizer_is_bert_base_uncased():
    tokenizer = load_tokenizer()
    assert len(tokenizer) == 30522
    assert (tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id) == (0, 101, 102)
    assert tokenizer.mask_token_id == 103
    assert tokenizer("Hello World")["input_ids"] == tokenizer("hello world")["input_ids"]


def test_sentence_transformer_loads_a_neobert_directory_with_mean_pooling(tmp_path):
    from sentence_transformers import SentenceTransformer

    model = NeoBERTModel(tiny_config()).eval()
    tokenizer = load_tokenizer(max_length=128)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    st = SentenceTransformer(str(tmp_path), device="cpu")
    pooling = st[1]
    assert pooling.pooling_mode == "mean"
    assert st.max_seq_length == 128

    sentences = ["a short one", "a much longer sentence with many more words in it than the first"]
    embeddings = st.encode(sentences, convert_to_tensor=True)
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = model(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = (states * mask).sum(1) / mask.sum(1)
    assert embeddings.shape == (2, 64)
    assert torch.allclose(embeddings, expected, atol=1e-5)
