"""Pretraining data: masking, packing plans, deterministic batches, their counts, the LR schedules."""

import math

import datasets
import numpy as np
import pytest
import torch
from synthetic_text import random_documents

from neoembed.pretrain.batches import (
    MLMBatches,
    batch_counts,
    mask_tokens,
    packed_to_padded,
    plan_rows,
    tokenize_documents,
)
from neoembed.pretrain.neobert import NeoBERTForMaskedLM, tiny_config
from neoembed.pretrain.neobert.tokenizer import load_tokenizer
from neoembed.pretrain.schedule import lr_multiplier, wsd_multiplier

MASK, VOCAB = 103, 30522


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def test_release_masking_selects_the_rate_of_non_special_tokens_all_as_mask():
    ids = torch.randint(1000, 30000, (64, 128))
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    gen = torch.Generator().manual_seed(0)
    inputs, labels = mask_tokens(
        ids, special, rate=0.2, mode="mask", mask_token_id=MASK, vocab_size=VOCAB, generator=gen
    )
    selected = labels != -100
    assert not selected[special].any(), "special tokens are never selected"
    assert abs(selected.float().sum().item() / (~special).sum().item() - 0.2) < 0.01
    assert (inputs[selected] == MASK).all() and (labels[selected] == ids[selected]).all()
    assert torch.equal(inputs[~selected], ids[~selected])


def test_bert_masking_splits_80_10_10():
    ids = torch.randint(1000, 30000, (128, 256))
    special = torch.zeros_like(ids, dtype=torch.bool)
    gen = torch.Generator().manual_seed(1)
    inputs, labels = mask_tokens(
        ids, special, rate=0.15, mode="80-10-10", mask_token_id=MASK, vocab_size=VOCAB, generator=gen
    )
    selected = labels != -100
    as_mask = (inputs[selected] == MASK).float().mean().item()
    unchanged = (inputs[selected] == ids[selected]).float().mean().item()
    assert abs(as_mask - 0.8) < 0.02 and abs(unchanged - 0.1) < 0.02


def test_packed_plan_covers_every_token_once_within_max_length():
    lengths = np.array([5, 30, 12, 7, 64, 3])
    plan = plan_rows(lengths, np.arange(len(lengths)), max_length=16, packed=True)
    covered = {doc: [] for doc in range(len(lengths))}
    for row in range(plan.num_rows):
        pieces = plan.pieces(row)
        assert sum(end - start for _, start, end in pieces) <= 16
        for doc, start, end in pieces:
            covered[doc].append((start, end))
    for doc, spans in covered.items():
        assert sorted(spans)[0][0] == 0 and sum(e - s for s, e in spans) == lengths[doc]


def test_padded_plan_is_one_truncated_document_per_row():
    plan = plan_rows(np.array([5, 30]), np.array([3, 8]), max_length=16, packed=False)
    assert [plan.pieces(r) for r in range(plan.num_rows)] == [[(3, 0, 5)], [(8, 0, 16)]]


def make_batches(tokenizer, packed, **overrides):
    docs = datasets.Dataset.from_dict({"text": random_documents(60)})
    tokenized = tokenize_documents(docs, tokenizer, truncate_to=None if packed else 32)
    fields = dict(
        max_length=32, packed=packed, batch_size=4, num_items=12, seed=3, mask_rate=0.2, mask_mode="mask"
    )
    fields.update(overrides)
    return MLMBatches(tokenized, tokenizer=tokenizer, **fields)


def test_batches_are_a_pure_function_of_seed_and_index(tokenizer):
    first, second = make_batches(tokenizer, True), make_batches(tokenizer, True)
    for item in (0, 7, 11):
        a, b = first[item], second[item]
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(first[0]["input_ids"], first[1]["input_ids"])


def test_packed_batch_marks_each_piece_and_never_masks_cls_or_sep(tokenizer):
    batch = make_batches(tokenizer, True)[0]
    ids, labels, cu = batch["input_ids"][0], batch["labels"][0], batch["cu_seqlens"]
    assert cu[0] == 0 and cu[-1] == len(ids) and (cu[1:] > cu[:-1]).all()
    assert (cu[1:] - cu[:-1]).max() <= 32
    cls_or_sep = torch.isin(ids, torch.tensor([101, 102]))
    assert (labels[cls_or_sep] == -100).all()


def test_length_buckets_draw_batches_of_long_documents(tokenizer):
    batches = make_batches(tokenizer, False, length_buckets=[(0, 0.5), (25, 0.5)], num_items=40)
    long_bucket = [i for i in range(40) if batches.rows_of(i)[0] == 1]
    assert 8 < len(long_bucket) < 32, "about half the batches come from the >= 25-token bucket"
    for item in long_bucket:
        assert (batches[item]["attention_mask"].sum(1) >= 25).all()


def test_packed_and_padded_batches_of_the_same_documents_give_the_same_loss(tokenizer):
    torch.manual_seed(0)
    model = NeoBERTForMaskedLM(tiny_config()).eval()
    packed = make_batches(tokenizer, True)[0]
    padded = packed_to_padded(packed)
    assert padded["attention_mask"].sum() == packed["input_ids"].numel()
    with torch.no_grad():
        assert abs(model(**packed).loss.item() - model(**padded).loss.item()) < 1e-5


def test_sparse_prediction_gives_the_same_loss(tokenizer):
    model = NeoBERTForMaskedLM(tiny_config()).eval()
    batch = make_batches(tokenizer, True)[0]
    with torch.no_grad():
        dense = model(**batch).loss
        model.config.sparse_prediction = True
        sparse = model(**batch)
    assert abs(dense.item() - sparse.loss.item()) < 1e-5
    assert sparse.logits.shape[0] == (batch["labels"] != -100).sum()


def test_schedule_warms_up_decays_by_cosine_then_stays_at_ten_percent():
    def f(step):
        return lr_multiplier(step, warmup_steps=100, total_steps=1000, decay_fraction=0.9, min_ratio=0.1)

    assert f(0) == 0.0 and f(50) == 0.5 and f(100) == 1.0
    midpoint = 100 + (900 - 100) // 2
    assert math.isclose(f(midpoint), 0.1 + 0.9 * 0.5, rel_tol=1e-9)
    assert math.isclose(f(899), 0.1, abs_tol=1e-4) and f(900) == 0.1 and f(999) == 0.1
    assert all(f(s) >= f(s + 1) for s in range(100, 999))


def test_wsd_schedule_warms_up_holds_the_peak_then_decays_by_one_minus_sqrt():
    def f(step):
        return wsd_multiplier(
            step, warmup_steps=100, total_steps=1000, decay_steps_fraction=0.2, min_ratio=0.0
        )

    assert f(0) == 0.0 and f(50) == 0.5
    assert all(f(s) == 1.0 for s in range(100, 801)), "stable at the peak until the last 20% of the steps"
    assert math.isclose(f(850), 1 - math.sqrt(0.25)) and math.isclose(f(1000), 0.0, abs_tol=1e-12)
    assert all(f(s) > f(s + 1) for s in range(800, 1000))


def test_batch_counts_real_tokens_slots_attention_and_predicted_tokens(tokenizer):
    packed = make_batches(tokenizer, True)[0]
    padded = packed_to_padded(packed)
    lengths = packed["cu_seqlens"].diff()
    for batch in (packed, padded):
        real, slots, squares, predicted = batch_counts(batch, 32).tolist()
        assert real == int(lengths.sum()) and squares == int((lengths**2).sum())
        assert predicted == int((packed["labels"] != -100).sum())
    assert batch_counts(padded, 32)[1] == padded["attention_mask"].numel(), "padded slots include the padding"
    tokens = packed["input_ids"].numel()
    assert batch_counts(packed, 32)[1] == -(-tokens // 32) * 32 == 4 * 32, "4 full packed rows"


@pytest.mark.parametrize("recipe", ["pretrain-cpu", "neobert-stage1", "neobert-stage2"])
def test_shipped_recipes_validate(recipe):
    from pathlib import Path

    from neoembed.pretrain.settings import PretrainSettings
    from neoembed.recipes import load_recipe

    path = Path(__file__).resolve().parents[1] / "recipes" / f"{recipe}.yaml"
    settings = load_recipe(path, PretrainSettings)
    assert settings.optim.betas == (0.9, 0.95) and settings.data.mask_rate == 0.2
