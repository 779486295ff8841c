"""Distillation from a teacher: the two terms against hand computations, composition with GradCache and
Matryoshka, the teacher cache (resume after a kill, another teacher or other data), and short training runs."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from test_contrastive import features, grads, keys, records, tiny_encoder_dir, write_build

from neoembed.contrastive.data import load_training_sources, text_keys
from neoembed.contrastive.losses.base import with_matryoshka
from neoembed.contrastive.losses.distill import DistillationLoss, EmbeddingDistillation, ScoreDistillation
from neoembed.contrastive.losses.infonce import InfoNCELoss
from neoembed.contrastive.model import build_model
from neoembed.contrastive.settings import ContrastiveSettings
from neoembed.contrastive.teacher_cache import (
    DistinctTexts,
    TeacherCacheError,
    TeacherTargets,
    cache_teacher_outputs,
    pin_teacher,
    shared_cache_dir,
    teacher_cache_root,
    teacher_identity,
)
from neoembed.data.normalize import text_key
from neoembed.embedder import model_fingerprint

# A toy batch: row 0's hard negative is row 2's positive (a copy InfoNCE counts once), the rest distinct.
QUERIES = ["q0", "q1", "q2"]
POSITIVES = ["p0", "p1", "p2"]
NEGATIVES = ["n0", "n1", "p2"]
TOY = [QUERIES, POSITIVES, NEGATIVES]
RNG = np.random.default_rng(0)
STUDENT = {
    t: RNG.normal(size=4).astype("float32") for t in QUERIES + POSITIVES + NEGATIVES
}  # 4-d student embeddings
TEACHER = {
    t: RNG.normal(size=3).astype("float32") for t in QUERIES + POSITIVES + NEGATIVES
}  # 3-d teacher embeddings


class Student:
    """What the loss terms ask of a model: its embedding size and device."""

    device = torch.device("cpu")

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension

    def get_embedding_dimension(self) -> int:
        return self.dimension


def targets(table: dict[str, np.ndarray]) -> TeacherTargets:
    texts = list(table)
    return TeacherTargets(np.array([text_key(t) for t in texts]), np.stack([table[t] for t in texts]))


def student_reps(columns: list[list[str]]) -> list[list[torch.Tensor]]:
    """The loss's `reps`: per column one tensor (one GradCache mini-batch), needing gradients."""
    return [[torch.tensor(np.stack([STUDENT[t] for t in column]), requires_grad=True)] for column in columns]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def softmax(scores: list[float]) -> list[float]:
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    return [e / sum(exps) for e in exps]


def test_score_distillation_is_the_kl_of_the_teachers_in_batch_softmax_to_the_students():
    temperature = 0.5
    term = ScoreDistillation(targets(TEACHER), temperature=temperature, weight=2.0)
    loss = DistillationLoss(None, term, "toy", weight=0.0)
    value = loss.calculate_loss(student_reps(TOY), keys(TOY)).item()
    # By hand: every query against the distinct documents of the batch (p2 once), both sides alike.
    documents = list(dict.fromkeys(POSITIVES + NEGATIVES))
    kl = 0.0
    for query in QUERIES:
        teacher = softmax([cosine(TEACHER[query], TEACHER[d]) / temperature for d in documents])
        student = softmax([cosine(STUDENT[query], STUDENT[d]) / temperature for d in documents])
        kl += sum(t * math.log(t / s) for t, s in zip(teacher, student, strict=True))
    assert value == pytest.approx(2.0 * kl / len(QUERIES), rel=1e-5)
    assert value > 0.01

    # With InfoNCE beside it: the weighted sum, each term logged.
    both = DistillationLoss(None, term, "toy", temperature=0.07, weight=0.5)
    total = both.calculate_loss(student_reps(TOY), keys(TOY)).item()
    infonce = InfoNCELoss(None, temperature=0.07).calculate_loss(student_reps(TOY), keys(TOY)).item()
    assert total == pytest.approx(0.5 * infonce + value, rel=1e-5)
    components = both.pop_components()
    assert components.keys() == {"infonce", "distill"}
    assert components["infonce"].item() == pytest.approx(0.5 * infonce, rel=1e-5)
    assert components["distill"].item() == pytest.approx(value, rel=1e-5)
    assert both.pop_components() == {}


def test_a_student_that_scores_like_its_teacher_has_no_score_distillation_loss():
    same = {t: np.append(v, np.float32(0)) for t, v in TEACHER.items()}  # same cosines, one more dimension
    term = ScoreDistillation(targets(TEACHER), temperature=0.05, weight=1.0)
    reps = [[torch.tensor(np.stack([same[t] for t in column]))] for column in TOY]
    assert DistillationLoss(None, term, "toy", weight=0.0).calculate_loss(
        reps, keys(TOY)
    ).item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("metric", ["cosine", "mse"])
def test_embedding_distillation_compares_each_distinct_text_through_the_projection(metric):
    term = EmbeddingDistillation(Student(4), targets(TEACHER), metric=metric, weight=1.0)
    assert term.projection is not None and term.projection.weight.shape == (3, 4)  # student 4-d, teacher 3-d
    weight, bias = term.projection.weight.detach().numpy(), term.projection.bias.detach().numpy()
    value = (
        DistillationLoss(None, term, "toy", weight=0.0).calculate_loss(student_reps(TOY), keys(TOY)).item()
    )
    distances = []
    for text in dict.fromkeys(QUERIES + POSITIVES + NEGATIVES):  # p2 appears twice and counts once
        projected, teacher = weight @ STUDENT[text] + bias, TEACHER[text]
        if metric == "cosine":
            distances.append(1 - cosine(projected, teacher))
        else:
            distances.append(float(np.mean((projected - teacher) ** 2)))
    assert value == pytest.approx(sum(distances) / len(distances), rel=1e-5)

    # The same dimensions: no projection, the embeddings compared as they are.
    plain = EmbeddingDistillation(Student(4), targets(STUDENT), metric=metric, weight=1.0)
    assert plain.projection is None
    own = DistillationLoss(None, plain, "toy", weight=0.0).calculate_loss(student_reps(TOY), keys(TOY))
    assert own.item() == pytest.approx(0.0, abs=1e-6)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, minilm_path):
    return build_model(str(tiny_encoder_dir(tmp_path_factory.mktemp("enc"), minilm_path)), "mean", 32)


COLUMNS = [
    [f"query {i} about topic {i * 7}" for i in range(6)],
    [f"the answer to question {i} is {i * 3}" for i in range(6)],
    [f"an unrelated sentence {i}" for i in range(6)],
]
COLUMNS[2][4] = COLUMNS[1][0]


@pytest.mark.parametrize(
    "target, dims",
    [("scores", None), ("embedding", None), ("scores", [32, 8])],
    ids=["scores", "embedding", "scores-matryoshka"],
)
def test_distillation_with_gradcache_gives_the_uncached_loss_and_gradients(tiny_model, target, dims):
    generator = np.random.default_rng(1)
    teacher = targets({t: generator.normal(size=16).astype("float32") for column in COLUMNS for t in column})
    results = []
    for mini_batch_size in (None, 2):
        tiny_model.zero_grad()
        torch.manual_seed(0)  # the same projection each time
        term = (
            ScoreDistillation(teacher, temperature=0.05, weight=1.0)
            if target == "scores"
            else EmbeddingDistillation(tiny_model, teacher, metric="cosine", weight=1.0)
        )
        loss = DistillationLoss(tiny_model, term, "toy", mini_batch_size=mini_batch_size, weight=0.5)
        if dims:
            loss = with_matryoshka(tiny_model, loss, dims, [1.0, 0.5])
        value = loss(features(tiny_model, COLUMNS), keys(COLUMNS))
        value.backward()
        projection = getattr(term, "projection", None) or torch.nn.Linear(1, 1).requires_grad_(False)
        gradients = grads(tiny_model) | grads(torch.nn.ModuleDict({"projection": projection}))
        results.append((value.item(), gradients))
    (plain, plain_grads), (cached, cached_grads) = results
    assert cached == pytest.approx(plain, rel=1e-5)
    assert plain_grads.keys() == cached_grads.keys() and plain_grads
    assert ("projection.weight" in plain_grads) == (target == "embedding")  # 32-d student, 16-d teacher
    for name, grad in plain_grads.items():
        assert torch.allclose(grad, cached_grads[name], atol=1e-6, rtol=1e-4), name


# The teacher cache ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    root = tmp_path_factory.mktemp("build")
    return write_build(root / "out", {"alpha": records("alpha", 24), "beta": records("beta", 12)})


def distinct_texts(build: Path, **sources) -> DistinctTexts:
    loaded = load_training_sources(build, None, 2, **sources)
    return DistinctTexts(loaded, {name: text_keys(d) for name, d in loaded.items()})


def test_distinct_texts_are_each_training_text_once_in_first_seen_order(build):
    texts = distinct_texts(build)
    loaded = load_training_sources(build, None, 2)
    seen = {}  # key -> the first text with it, source by source, column by column, row by row
    for d in loaded.values():
        for column in ("query", "positive", "negative_1", "negative_2"):
            for text in d[column]:
                seen.setdefault(text_key(text), text)
    expected = list(seen.values())
    assert len(texts) == len(expected) < sum(4 * len(d) for d in loaded.values())  # the fillers repeat
    assert texts[: len(texts)] == expected and texts[5] == expected[5]
    assert texts[7:30] == expected[7:30]  # a chunk reads across sources and columns


class Interrupted(Exception):
    pass


def test_a_killed_teacher_cache_resumes_to_the_uninterrupted_outputs(tmp_path, build, tiny_model):
    texts = distinct_texts(build)
    identity = teacher_identity(tiny_model, "tiny", texts)
    straight = cache_teacher_outputs(tiny_model, identity, texts, tmp_path / "a", batch_size=4, chunk_rows=8)
    reference = np.array(straight.vectors)
    assert reference.shape == (len(texts), 32)
    # Looked up by key, a text's row is the teacher's embedding of that text.
    probe = [texts[3], texts[len(texts) - 1]]
    looked_up = straight(torch.tensor([text_key(t) for t in probe]))
    assert torch.allclose(looked_up, tiny_model.encode(probe, convert_to_tensor=True), atol=1e-5)

    encode, calls = tiny_model.encode, []

    def dies_at_the_third_chunk(chunk, **kwargs):
        calls.append(len(chunk))
        if len(calls) == 3:
            raise Interrupted
        return encode(chunk, **kwargs)

    tiny_model.encode = dies_at_the_third_chunk
    try:
        with pytest.raises(Interrupted):
            cache_teacher_outputs(tiny_model, identity, texts, tmp_path / "b", batch_size=4, chunk_rows=8)
        with (tmp_path / "b" / "vectors.f32").open("ab") as torn:  # and a half-written row
            torn.write(b"\0" * 10)
        calls.clear()
        tiny_model.encode = lambda chunk, **kwargs: calls.append(len(chunk)) or encode(chunk, **kwargs)
        resumed = cache_teacher_outputs(
            tiny_model, identity, texts, tmp_path / "b", batch_size=4, chunk_rows=8
        )
    finally:
        del tiny_model.encode
    assert sum(calls) == len(texts) - 16  # only the texts after the two complete chunks
    assert np.array_equal(np.array(resumed.vectors), reference)
    assert (tmp_path / "b" / "vectors.f32").read_bytes() == (tmp_path / "a" / "vectors.f32").read_bytes()


def test_runs_share_the_outputs_of_one_teacher_on_one_build_and_a_resumed_run_keeps_its_own(
    tmp_path, build, tiny_model
):
    import copy

    texts = distinct_texts(build)
    tiny = teacher_identity(tiny_model, "tiny", texts)
    # The same weights under another name (`base` resolves to the model being tuned): the same outputs.
    assert shared_cache_dir(
        tmp_path, teacher_identity(tiny_model, "elsewhere/tiny", texts)
    ) == shared_cache_dir(tmp_path, tiny)
    other = copy.deepcopy(tiny_model)  # the same name, other weights: a fine-tuned teacher, say
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    retrained = teacher_identity(other, "tiny", texts)
    fewer = teacher_identity(tiny_model, "tiny", distinct_texts(build, max_rows=6))
    directories = {shared_cache_dir(tmp_path, identity) for identity in (tiny, retrained, fewer)}
    assert len(directories) == 3 and all(d.parent == tmp_path for d in directories)

    # A run pins what it trains on; once checkpoints trained on it, other outputs are refused, naming what
    # changed; before any checkpoint, the run moves to the new outputs.
    record = tmp_path / "run" / "teacher" / "manifest.json"
    pin_teacher(record, tiny, "here", trained_on=False)
    with pytest.raises(TeacherCacheError, match=r"\(fingerprint differ") as refused:
        pin_teacher(record, retrained, "there", trained_on=True)
    assert str(record) in str(refused.value) and "train.output_dir" in str(refused.value)
    with pytest.raises(TeacherCacheError, match="texts, keys"):
        pin_teacher(record, fewer, "there", trained_on=True)
    assert json.loads(record.read_text()) == {**tiny, "outputs": "here"}
    pin_teacher(record, retrained, "there", trained_on=False)
    assert json.loads(record.read_text())["fingerprint"] == model_fingerprint(other)


def test_the_teacher_outputs_live_beside_the_build_or_in_the_run_where_the_build_is_read_only(
    tmp_path, monkeypatch
):
    import neoembed.contrastive.teacher_cache as teacher_cache

    build, run = tmp_path / "build", tmp_path / "run"
    build.mkdir()
    assert teacher_cache_root(build, run) == build / "teacher-outputs"
    # (os.access, not chmod: the tests may run as root, who may write anywhere)
    monkeypatch.setattr(teacher_cache.os, "access", lambda path, mode: path != build)
    assert teacher_cache_root(build, run) == run / "teacher"


# Training --------------------------------------------------------------------------------------------


def tiny_teacher_dir(root: Path, minilm_path: Path) -> Path:
    """A random 16-d BERT (the tests' 32-d students need a projection to it), MiniLM's tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    path = root / "tiny-teacher"
    torch.manual_seed(1)
    BertModel(
        BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    ).save_pretrained(path)
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(path)
    return path


def recipe(build: Path, base: Path, out: Path, distill: dict, steps: int = 6, **loss) -> dict:
    return {
        "data": {"path": str(build), "max_negatives": 2},
        "model": {"base": str(base), "max_length": 24},
        "loss": {"distill": {"teacher": "minilm", "batch_size": 32, **distill}, **loss},
        "optim": {"warmup_steps": 0, "lr": 2e-3, "schedule": "constant_with_warmup"},
        "train": {
            "output_dir": str(out),
            "max_steps": steps,
            "batch_size": 6,
            "log_steps": 1,
            "save_steps": steps // 2,
            "threads": 1,
        },
        "eval": {"sets": []},
    }


@pytest.mark.parametrize("target", ["scores", "embedding"])
def test_a_few_distillation_steps_lower_the_distillation_loss(tmp_path, build, minilm_path, target):
    from neoembed.contrastive.train import build_trainer

    base = tiny_encoder_dir(tmp_path, minilm_path)
    settings = recipe(build, base, tmp_path / "run", {"target": target}, infonce_weight=0.0)
    trainer = build_trainer(ContrastiveSettings.model_validate(settings))
    rows = [trainer.train_dataset["alpha"][i] for i in range(6)]
    features, labels = trainer.collect_features(trainer.data_collator(rows))

    def loss() -> float:
        with torch.no_grad():
            return trainer.loss(features, labels).item()

    before = loss()
    trainer.train()
    assert loss() < 0.9 * before
    manifest = json.loads((tmp_path / "run" / "teacher" / "manifest.json").read_text())
    assert manifest["teacher"] == "minilm" and manifest["dimension"] == 384
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(line["distill"] == pytest.approx(line["loss"], rel=1e-3) for line in logged if "loss" in line)


def test_a_resumed_distillation_run_ends_with_the_uninterrupted_weights_and_states_it_in_its_card(
    tmp_path, build, minilm_path
):
    """The embedding target with a projection: its weights travel in the checkpoints, not the export."""
    from safetensors.torch import load_file

    from neoembed.contrastive.train import run_contrastive

    base = tiny_encoder_dir(tmp_path, minilm_path)

    teacher = str(tiny_teacher_dir(tmp_path, minilm_path))

    def run(out: Path) -> dict:
        plan = recipe(build, base, out, {"target": "embedding", "weight": 2.0, "teacher": teacher}, steps=4)
        return run_contrastive(ContrastiveSettings.model_validate(plan))

    run(tmp_path / "a")
    outputs = Path(json.loads((tmp_path / "a" / "teacher" / "manifest.json").read_text())["outputs"])
    assert outputs.parent == build / "teacher-outputs"
    embedded = (outputs / "vectors.f32").stat().st_mtime_ns
    crashed = tmp_path / "b"
    run(crashed)
    assert (outputs / "vectors.f32").stat().st_mtime_ns == embedded  # the second run read the first's outputs
    assert (crashed / "checkpoint-2" / "distill_projection.safetensors").exists()
    for lost in ("checkpoint-4", "neobert-embed"):  # killed after step 2's checkpoint
        shutil.rmtree(crashed / lost)
    (outputs / "vectors.f32").unlink()  # and the shared cache is rebuilt to the same outputs
    summary = run(crashed)
    assert summary.steps == 4
    reference, again = (
        load_file(r / "neobert-embed" / "model.safetensors") for r in (tmp_path / "a", crashed)
    )
    for name, value in reference.items():
        assert torch.allclose(value, again[name], atol=1e-6), name
    assert not any("projection" in name or value.shape[0] == 16 for name, value in reference.items())

    logged = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    step = next(line for line in logged if "loss" in line)
    assert step["infonce"] > 0 and step["distill"] > 0
    assert step["loss"] == pytest.approx(step["infonce"] + step["distill"], rel=1e-3)
    card = (tmp_path / "a" / "neobert-embed" / "README.md").read_text()
    assert f"(weight 1.0) plus distillation from **{teacher}** (weight 2.0)" in card
    assert "cosine distance through a learned projection (not exported)" in card and "- distillation" in card


def test_distillation_recipes_that_cannot_work_are_refused_naming_the_field(tmp_path, build):
    plan = recipe(build, Path("unused"), tmp_path / "run", {"target": "embedding"}, matryoshka_dims=[16])
    with pytest.raises(ValueError, match="distill.target embedding does not combine with matryoshka_dims"):
        ContrastiveSettings.model_validate(plan)
    plan = recipe(build, Path("unused"), tmp_path / "run", {}, infonce_weight=0.0)
    del plan["loss"]["distill"]
    with pytest.raises(ValueError, match="infonce_weight 0 leaves no loss"):
        ContrastiveSettings.model_validate(plan)


def test_a_teacher_that_does_not_load_is_named_and_pins_no_recipe(tmp_path, build, minilm_path):
    from neoembed.contrastive.train import build_trainer
    from neoembed.embedder import EmbedderError

    base = tiny_encoder_dir(tmp_path, minilm_path)
    plan = recipe(build, base, tmp_path / "run", {"teacher": str(tmp_path / "no-teacher")})
    with pytest.raises(EmbedderError, match="loss.distill.teacher"):
        build_trainer(ContrastiveSettings.model_validate(plan))
    assert not (tmp_path / "run" / "recipe.json").exists()
