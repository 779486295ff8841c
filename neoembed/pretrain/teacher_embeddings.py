"""Word embeddings for a NeoBERT trained from scratch, taken from a sentence-transformers teacher that shares
its vocabulary: the teacher's own input embedding of each vocabulary token (its word-embedding table), reduced by
PCA to the student's width. A small model pretrained briefly on CPU otherwise starts from random vectors for the
many tokens its corpus rarely shows, and cannot embed text it has not seen.

The table, not the teacher's encoding of each token alone (Model2Vec's distillation, used before): over 3 seeds
of the quickstart's pretraining and fine-tuning, the table gave the better embedder on WordNet and FOLDOC, and it
costs no forward pass (the encoding took 16 s of the quickstart's 2-minute pretraining step on an AVX2 CPU;
docs/benchmarks/quickstart.md). Hand-written: it is one centring and one SVD.
"""

from __future__ import annotations

import torch
from torch import Tensor

from neoembed.embedder import load_embedder
from neoembed.recipes import RecipeError


def teacher_token_embeddings(teacher: str, tokenizer, width: int) -> Tensor:
    """(len(tokenizer), width) vectors: `teacher`'s input embedding of each token id, centred and projected onto
    its top `width` principal components."""
    model = load_embedder(teacher)
    if model.tokenizer.get_vocab() != tokenizer.get_vocab():
        raise RecipeError(
            f"model.embeddings_from {teacher!r}: the teacher's vocabulary differs from model.tokenizer's, so "
            "its token vectors cannot be matched to the student's tokens"
        )
    table = model[0].auto_model.get_input_embeddings().weight.detach().float().cpu()[: len(tokenizer)]
    if width > table.shape[1]:
        raise RecipeError(
            f"model.embeddings_from {teacher!r}: its {table.shape[1]}-dimensional token embeddings cannot "
            f"initialise a hidden_size of {width}"
        )
    centred = table - table.mean(dim=0)
    _, _, components = torch.linalg.svd(centred, full_matrices=False)
    return centred @ components[:width].T
