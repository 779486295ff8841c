"""InfoNCE loss (duplicates, GradCache), homogeneous sampler, records, base-model checks and recipes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from torch.utils.data import ConcatDataset

from neoembed.contrastive.data import (
    ContrastiveDataError,
    TextKeyCollator,
    load_training_sources,
    text_keys,
)
from neoembed.contrastive.losses.base import with_matryoshka
from neoembed.contrastive.losses.infonce import InfoNCELoss
from neoembed.contrastive.model import BaseModelError, build_model
from neoembed.contrastive.sampler import HomogeneousBatchSampler, SamplerError
from neoembed.contrastive.settings import ContrastiveSettings
from neoembed.data.normalize import text_key
from neoembed.recipes import RecipeError, load_recipe

ROOT = Path(__file__).resolve().parents[1]


def write_build(out: Path, sources: dict[str, dict]) -> Path:
    """A finished `neoembed build-data` layout: <out>/<source>/part-00000.parquet plus stats.json."""
    stats = {"sources": {}}
    for name, columns in sources.items():
        (out / name).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(columns), out / name / "part-00000.parquet")
        stats["sources"][name] = {"rows_out": len(columns["query"])}
    (out / "stats.json").write_text(json.dumps(stats))
    return out


def records(name: str, n: int, negatives_per_row=lambda i: i % 3) -> dict:
    return {
        "query": [f"{name} question number {i}" for i in range(n)],
        "positive": [f"{name} answer text {i}" for i in range(n)],
        "negatives": [
            [f"{name} wrong answer {i} {j}" for j in range(negatives_per_row(i))] for i in range(n)
        ],
        "source": [name] * n,
    }


def tiny_encoder_dir(root: Path, minilm_path: Path, model_type: str = "bert") -> Path:
    """A small random BERT (no dropout) with MiniLM's tokenizer, saved as a plain transformers directory."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    path = root / f"tiny-{model_type}"
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, minilm_path):
    return build_model(str(tiny_encoder_dir(tmp_path_factory.mktemp("enc"), minilm_path)), "mean", 32)


def features(model, columns: list[list[str]]) -> list[dict]:
    return [model.tokenize(texts) for texts in columns]


def keys(columns: list[list[str]]) -> list[torch.Tensor]:
    """Each column's text keys: the loss's labels, as the trainer passes them."""
    return [torch.tensor([text_key(t) for t in texts]) for texts in columns]


COLUMNS = [
    [f"query {i} about topic {i * 7}" for i in range(8)],
    [f"the answer to question {i} is {i * 3}" for i in range(8)],
    [f"an unrelated sentence {i}" for i in range(8)],
    [f"yet another distractor with {i} words" for i in range(8)],
]


def grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def make_loss(model, mini_batch_size=None, dims=None, weights=None, **kwargs):
    loss = InfoNCELoss(model, mini_batch_size=mini_batch_size, **kwargs)
    return with_matryoshka(model, loss, dims, weights) if dims else loss


@pytest.mark.parametrize(
    "symmetric, dims", [(False, None), (True, None), (True, [32, 16, 8])], ids=["plain", "sym", "matryoshka"]
)
def test_cached_loss_gives_the_uncached_loss_and_gradients(tiny_model, symmetric, dims):
    results = []
    for mini_batch_size in (None, 3):
        tiny_model.zero_grad()
        loss = make_loss(tiny_model, mini_batch_size, dims, [1.0, 0.5, 0.25], symmetric=symmetric)
        value = loss(features(tiny_model, COLUMNS), keys(COLUMNS))
        value.backward()
        results.append((value.item(), grads(tiny_model)))
    (plain, plain_grads), (cached, cached_grads) = results
    assert cached == pytest.approx(plain, rel=1e-5)
    assert plain_grads.keys() == cached_grads.keys() and plain_grads
    for name, grad in plain_grads.items():
        assert torch.allclose(grad, cached_grads[name], atol=1e-6, rtol=1e-4), name


@pytest.mark.parametrize("mini_batch_size", [None, 3])
def test_matryoshka_sums_infonce_over_truncated_renormalised_embeddings(tiny_model, mini_batch_size):
    dims, weights = [8, 32, 16], [0.25, 1.0, 0.5]  # any order: the library sorts them together
    tiny_model.eval()
    with torch.no_grad():
        value = make_loss(tiny_model, mini_batch_size, dims, weights)(
            features(tiny_model, COLUMNS), keys(COLUMNS)
        )
        query, *docs = [tiny_model(f)["sentence_embedding"] for f in features(tiny_model, COLUMNS)]
    docs, rows = torch.cat(docs), torch.arange(len(query))
    expected = 0.0
    for dim, weight in zip(dims, weights, strict=True):
        q, d = (torch.nn.functional.normalize(t[:, :dim], dim=-1) for t in (query, docs))
        expected += weight * torch.nn.functional.cross_entropy(q @ d.T / 0.07, rows).item()
    assert value.item() == pytest.approx(expected, rel=1e-5)


def expected_infonce(model, queries, positives, candidates_per_row, temperature=0.07) -> float:
    """-log softmax of each positive among that row's candidate texts, computed independently."""
    with torch.no_grad():
        losses = []
        for query, positive, candidates in zip(queries, positives, candidates_per_row, strict=True):
            q, docs = model.encode([query]), model.encode(candidates, convert_to_tensor=True)
            q = torch.nn.functional.normalize(torch.as_tensor(q), dim=-1)
            scores = q @ torch.nn.functional.normalize(docs, dim=-1).T / temperature
            losses.append(-(scores[0, candidates.index(positive)] - torch.logsumexp(scores[0], dim=0)))
        return float(torch.stack(losses).mean())


def test_copies_of_a_positive_are_masked_and_each_text_counts_once(tiny_model):
    """Row 0's hard negative is its own positive, and row 2's positive repeats row 1's hard negative."""
    tiny_model.eval()
    queries = ["what is a cat", "what is a dog", "what is a cow"]
    positives = ["a small feline", "a loyal canine", "a small feline pet"]
    negatives = ["a small feline", "a small feline pet", "grass eater"]
    loss = InfoNCELoss(tiny_model)
    with torch.no_grad():
        columns = [queries, positives, negatives]
        value = loss(features(tiny_model, columns), keys(columns)).item()
    distinct = list(dict.fromkeys(positives + negatives))  # every distinct text once
    expected = expected_infonce(tiny_model, queries, positives, [distinct] * 3)
    assert value == pytest.approx(expected, rel=1e-4)

    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    unmasked = MultipleNegativesRankingLoss(tiny_model, scale=1 / 0.07)
    with torch.no_grad():
        library = unmasked(features(tiny_model, [queries, positives, negatives]), None).item()
    assert library > value + 0.1  # the library loss counts the copies as wrong answers


def test_the_collator_hands_the_loss_each_columns_text_keys(tiny_model, tmp_path):
    build = write_build(tmp_path / "build", {"a": records("a", 4, lambda i: 2)})
    rows = load_training_sources(build, None, max_negatives=2)["a"]
    batch = TextKeyCollator(preprocess_fn=tiny_model.preprocess)([rows[i] for i in range(3)])
    names = ("query", "positive", "negative_1", "negative_2")  # the key columns are not tokenised as texts
    assert sorted(k for k in batch if k.endswith("_input_ids")) == sorted(f"{n}_input_ids" for n in names)
    expected = [[text_key(rows[i][name]) for name in names] for i in range(3)]
    assert batch["text_keys"].dtype == torch.int64 and batch["text_keys"].tolist() == expected
    with pytest.raises(ValueError, match="text keys of each of its 2 columns"):
        InfoNCELoss(tiny_model)(features(tiny_model, [["a"], ["b"]]), None)


class _Rows(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def make_sampler(rows, *, alpha=0.5, world_size=1, grad_accum=1, batch_size=4, seed=0, texts=None):
    """The sampler over sources of `rows` rows; `texts(source, row)` gives a row's texts (default: unique)."""
    dataset = ConcatDataset([_Rows(n) for n in rows])
    batch_samplers = [torch.utils.data.BatchSampler(range(n), batch_size, drop_last=True) for n in rows]
    texts = texts or (lambda source, row: (f"{source}-{row}",))
    keys = [np.array([[text_key(t) for t in texts(s, r)] for r in range(n)]) for s, n in enumerate(rows)]
    return HomogeneousBatchSampler(
        dataset,
        batch_samplers,
        None,
        seed,
        alpha=alpha,
        world_size=world_size,
        grad_accum=grad_accum,
        keys=lambda source, row: keys[source][row].tolist(),
    )


def source_of(index: int, rows) -> int:
    return 0 if index < rows[0] else 1


def test_sampler_one_source_per_optimisation_step_across_ranks_and_accumulation():
    rows = [400, 100]
    sampler = make_sampler(rows, world_size=2, grad_accum=2)
    batches = list(sampler)
    assert len(batches) == len(sampler) and len(batches) % 4 == 0
    for step in range(0, len(batches), 4):  # ranks x accumulation batches of one optimisation step
        group = batches[step : step + 4]
        assert len({source_of(i, rows) for batch in group for i in batch}) == 1
        flat = [i for batch in group for i in batch]
        assert len(flat) == len(set(flat)) == 16
    assert batches == list(make_sampler(rows, world_size=2, grad_accum=2))  # same seed: same order everywhere
    sampler.set_epoch(1)
    assert list(sampler) != batches


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_sampler_draws_sources_proportional_to_rows_to_the_alpha(alpha):
    rows = [3600, 400]
    sampler = make_sampler(rows, alpha=alpha, batch_size=1)
    counts = Counter(source_of(batch[0], rows) for batch in sampler)
    expected = rows[1] ** alpha / (rows[0] ** alpha + rows[1] ** alpha)
    assert counts[1] / sum(counts.values()) == pytest.approx(expected, abs=0.025)


def test_sampler_keeps_duplicate_texts_out_of_a_batch():
    def texts(source, row):  # only five distinct queries, written in different case and spacing
        return (f"Query  {row % 5}" if row % 2 else f"query {row % 5}", f"positive {row}")

    sampler = make_sampler([50], batch_size=5, texts=texts)
    for batch in sampler:
        assert len({row % 5 for row in batch}) == 5
    with pytest.raises(SamplerError, match="distinct"):
        list(make_sampler([50], batch_size=6, texts=texts))


def test_text_keys_are_fixed_size_and_equal_only_for_the_same_normalised_text(tmp_path):
    long = "word " * 5000
    queries, positives = ["A  cat", "a dog", long], ["a cat.", "A DOG ", long + " more"]
    stored = {
        "query": queries,
        "positive": positives,
        "negatives": [[], [], []],
        "source": ["s"] * 3,
        "query_key": [text_key(t) for t in queries],
        "positive_key": [text_key(t) for t in positives],
        "negative_keys": [[], [], []],
    }
    old = {
        c: stored[c] for c in ("query", "positive", "negatives", "source")
    }  # built before keys were stored
    for name, columns in (("stored", stored), ("computed", old)):
        rows = load_training_sources(write_build(tmp_path / name, {"s": columns}), None, max_negatives=2)["s"]
        keys = text_keys(rows)
        assert keys.shape == (3, 2) and keys.dtype == np.int64 and keys.nbytes == 3 * 2 * 8
        assert keys[0, 0] == keys[0, 1] == text_key("a cat") and keys[1, 0] == keys[1, 1]
        assert len(set(keys[:, 0].tolist())) == 3 and keys[2, 0] != keys[2, 1]


def test_records_become_fixed_negative_columns_padded_with_the_positive(tmp_path):
    build = write_build(tmp_path / "build", {"a": records("a", 6), "b": records("b", 4, lambda i: 5)})
    sources = load_training_sources(build, None, max_negatives=4)
    assert set(sources) == {"a", "b"}
    a, b = sources["a"], sources["b"]
    assert a.column_names == [
        *("query", "positive", "negative_1", "negative_2"),
        *("query_text_key", "positive_text_key", "negative_1_text_key", "negative_2_text_key"),
    ]
    assert a[0]["negative_1"] == a[0]["positive"]  # row 0 has no negatives
    assert a[0]["negative_1_text_key"] == a[0]["positive_text_key"] == text_key(a[0]["positive"])
    assert a[2]["negative_2"] == "a wrong answer 2 1"
    assert "negative_4" in b.column_names and "negative_5" not in b.column_names  # capped at max_negatives


def test_bad_records_name_their_cause(tmp_path):
    empty = records("e", 0)
    with pytest.raises(ContrastiveDataError, match="no rows"):
        load_training_sources(write_build(tmp_path / "empty", {"e": empty}), None, 2)
    no_positive = records("p", 3)
    no_positive["positive"][1] = ""
    with pytest.raises(ContrastiveDataError, match="row 1 has no positive"):
        load_training_sources(write_build(tmp_path / "nopos", {"p": no_positive}), None, 2)
    broken = write_build(tmp_path / "broken", {"x": records("x", 3)})
    (broken / "x" / "part-00000.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ContrastiveDataError, match="parquet"):
        load_training_sources(broken, None, 2)
    with pytest.raises(ContrastiveDataError, match="stats.json"):
        load_training_sources(tmp_path / "missing", None, 2)
    missing_column = records("m", 3)
    del missing_column["negatives"]
    with pytest.raises(ContrastiveDataError, match="negatives"):
        load_training_sources(write_build(tmp_path / "cols", {"m": missing_column}), None, 2)


def test_base_models_that_are_not_usable_encoders_are_refused(tmp_path, minilm_path):
    from transformers import GPT2Config, GPT2Model

    GPT2Model(GPT2Config(n_layer=1, n_embd=16, n_head=2)).save_pretrained(tmp_path / "gpt2")
    with pytest.raises(BaseModelError, match="encoder"):
        build_model(str(tmp_path / "gpt2"), "mean", 32)
    with pytest.raises(BaseModelError, match="max_length 4096"):
        build_model(str(minilm_path), "mean", 4096)
    with pytest.raises(BaseModelError, match="cannot be loaded"):
        build_model(str(tmp_path / "nowhere"), "mean", 32)


def test_plain_encoders_get_the_requested_pooling(tmp_path, minilm_path):
    model = build_model(str(tiny_encoder_dir(tmp_path, minilm_path)), "cls", 16)
    assert model[1].pooling_mode == "cls" and model.max_seq_length == 16


def test_the_export_declares_the_training_length_or_the_positions_as_the_recipe_says(tmp_path, minilm_path):
    from neoembed.contrastive.export import declared_max_seq_length

    model = build_model(str(tiny_encoder_dir(tmp_path, minilm_path)), "mean", 16)  # 128 positions
    assert declared_max_seq_length(model, "train") == 16
    assert declared_max_seq_length(model, "positions") == 128
    assert declared_max_seq_length(model, 64) == 64
    with pytest.raises(BaseModelError, match="export.max_seq_length 256 exceeds the 128 positions"):
        declared_max_seq_length(model, 256)


def test_recipes_validate_and_unknown_fields_are_named(tmp_path):
    # The paper's temperature for NeoBERT; the CPU recipe's from the ablations in docs/contrastive.md.
    for name, temperature in (("contrastive-cpu.yaml", 0.05), ("contrastive-neobert.yaml", 0.07)):
        settings = load_recipe(ROOT / "recipes" / name, ContrastiveSettings)
        assert settings.loss.temperature == temperature and settings.model.pooling == "mean"
        assert [s.label for s in settings.eval.sets] == ["wordnet", "foldoc"]  # the cross-source set too
    paper = load_recipe(ROOT / "recipes" / "contrastive-neobert.yaml", ContrastiveSettings)
    assert paper.optim.betas == (0.9, 0.95) and paper.optim.warmup_steps == 2000
    assert paper.model.max_length == 1024 and paper.train.max_steps == 2000
    with pytest.raises(RecipeError, match="field loss.temprature: unknown field"):
        load_recipe(ROOT / "recipes" / "contrastive-cpu.yaml", ContrastiveSettings, {"loss.temprature": 1})
    cpu = ROOT / "recipes" / "contrastive-cpu.yaml"
    assert load_recipe(cpu, ContrastiveSettings, {"model.lora.r": 4}).model.lora.r == 4
    with pytest.raises(RecipeError, match="field model.lora.rank: unknown field"):
        load_recipe(cpu, ContrastiveSettings, {"model.lora.rank": 4})
    with pytest.raises(RecipeError, match="one weight per entry"):
        load_recipe(
            cpu, ContrastiveSettings, {"loss.matryoshka_dims": [64, 32], "loss.matryoshka_weights": [1]}
        )


@pytest.mark.parametrize(
    ("old", "write"),
    [
        ({"kind": "wordnet", "queries": 500}, "eval: {sets: [{kind: wordnet, queries: 500}, foldoc]}"),
        ({"kind": "none"}, "eval: {sets: []}"),
        (
            {"kind": "records", "path": "p", "source": "s"},
            "eval: {sets: [{kind: records, path: p, source: s}]}",
        ),
    ],
)
def test_a_recipe_with_the_replaced_eval_fields_is_told_what_to_write(tmp_path, old, write):
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump({"data": {"path": "d"}, "eval": old}))
    with pytest.raises(RecipeError) as err:
        load_recipe(path, ContrastiveSettings)
    message = str(err.value)
    assert str(path) in message and f"eval.{next(iter(old))}" in message and f"`{write}`" in message
    assert load_recipe(path, ContrastiveSettings, {"eval": yaml.safe_load(write.removeprefix("eval: "))})


@pytest.mark.parametrize(
    ("sets", "error"),
    [
        ([{"kind": "foldoc", "queries": 301}], "foldoc holds out 300 queries and 1500 definitions"),
        ([{"kind": "records", "path": "p"}], "a records set needs path and source"),
        ([{"kind": "wordnet", "source": "s"}], "path and source are for records and files sets, not wordnet"),
        (
            ["wordnet", {"kind": "records", "path": "p", "source": "wordnet"}],
            "two held-out sets named 'wordnet'",
        ),
    ],
)
def test_held_out_sets_that_cannot_be_scored_honestly_are_refused(sets, error):
    with pytest.raises(ValueError, match=error):
        ContrastiveSettings.model_validate({"data": {"path": "d"}, "eval": {"sets": sets}})
