"""Word embeddings for a NeoBERT trained from scratch, taken from a sentence-transformers teacher that shares
its vocabulary: the teacher's sentence embedding of each vocabulary token on its own, reduced by PCA to the
student's width (Model2Vec's distillation). A small model pretrained briefly on CPU otherwise starts from
random vectors for the many tokens its corpus rarely shows, and cannot embed text it has not seen.

Hand-written because model2vec's own `distill` pins transformers < 5.4; the computation is a forward pass
per token batch and an SVD.
"""

from __future__ import annotations

import torch
from torch import Tensor

from neoembed.embedder import load_embedder
from neoembed.recipes import RecipeError

BATCH = 1024  # tokens embedded per teacher forward pass


def teacher_token_embeddings(teacher: str, tokenizer, width: int) -> Tensor:
    """(len(tokenizer), width) vectors: `teacher`'s embedding of "[CLS] token [SEP]" for each token id,
    centred and projected onto its top `width` principal components."""
    model = load_embedder(teacher)
    if model.tokenizer.get_vocab() != tokenizer.get_vocab():
        raise RecipeError(
            f"model.embeddings_from {teacher!r}: the teacher's vocabulary differs from model.tokenizer's, so "
            "its token vectors cannot be matched to the student's tokens"
        )
    if width > model.get_embedding_dimension():
        raise RecipeError(
            f"model.embeddings_from {teacher!r}: its {model.get_embedding_dimension()}-dimensional embeddings "
            f"cannot initialise a hidden_size of {width}"
        )
    model.eval()
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    vectors = []
    with torch.inference_mode():
        for start in range(0, len(tokenizer), BATCH):
            ids = torch.arange(start, min(start + BATCH, len(tokenizer)), device=model.device)
            input_ids = torch.stack([torch.full_like(ids, cls), ids, torch.full_like(ids, sep)], dim=1)
            features = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
            vectors.append(model(features)["sentence_embedding"].float().cpu())  # the student is built on CPU
    embeddings = torch.cat(vectors)
    centred = embeddings - embeddings.mean(dim=0)
    _, _, components = torch.linalg.svd(centred, full_matrices=False)
    return centred @ components[:width].T
