"""The mteb ModelMeta of an exported embedder: training datasets derived from the build's stats.json, so
mteb computes zero-shot status; mteb-eval evaluates the export under it."""

import json
import os
import tempfile

os.environ["MTEB_CACHE"] = tempfile.mkdtemp(prefix="mteb-cache-")  # before anything imports mteb

import pytest  # noqa: E402


def _stats(path, sources):
    path.mkdir(parents=True, exist_ok=True)
    (path / "stats.json").write_text(json.dumps({"sources": sources}))
    return path


def test_training_datasets_are_the_mteb_tasks_reading_the_built_sources(tmp_path):
    from neoembed.contrastive.model_meta import training_datasets

    data = _stats(
        tmp_path / "pairs",
        {
            "msmarco": {"dataset": "mteb/msmarco"},
            "sts12": {"dataset": "mteb/sts12-sts"},
            "wordnet": {"dataset": None},
        },
    )
    assert training_datasets(data, ["msmarco", "sts12", "wordnet"]) == {"MSMARCO", "STS12"}
    assert training_datasets(data, ["wordnet"]) == set()  # local files: zero-shot on every mteb task
    old = _stats(tmp_path / "old", {"msmarco": {"rows_out": 3}})  # a build that did not record datasets
    assert training_datasets(old, ["msmarco"]) is None
    assert training_datasets(tmp_path / "none", ["msmarco"]) is None


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    from neoembed.contrastive.export import export_model
    from neoembed.contrastive.model_card import TrainingFacts
    from neoembed.embedder import load_embedder

    root = tmp_path_factory.mktemp("export")
    data = _stats(root / "pairs", {"msmarco": {"dataset": "mteb/msmarco"}, "wordnet": {"dataset": None}})
    facts = TrainingFacts(
        name="tiny-embed",
        base_model="sentence-transformers/all-MiniLM-L6-v2",
        steps=1,
        temperature=0.05,
        dimension=384,
        pooling="mean",
        normalized=True,
        max_length=128,
        max_seq_length=128,
        lora=None,
        base_weight=0.0,
        matryoshka_dims=[384, 128, 64],
        data_path=str(data),
        rows={"msmarco": 10, "wordnet": 10},
        heldout={"wordnet": "held-out wordnet retrieval"},
        metric_names=["ndcg@10"],
        before={},
        after={},
        recipe={},
    )
    model = load_embedder("minilm")
    model.max_seq_length = 128
    return export_model(model, root / "tiny-embed", facts)


def test_an_export_carries_its_model_meta_with_the_builds_sources(export):
    from neoembed.evaluation import read_model_meta

    meta = read_model_meta(export)
    assert (export / "tokenizer_fingerprint.json").is_file()  # checked at every load
    assert meta.name == "local/tiny-embed"
    assert meta.training_datasets == {"MSMARCO"}
    assert meta.is_zero_shot_on(["MSMARCO"]) is False
    assert meta.is_zero_shot_on(["STS12"]) is True
    assert meta.embed_dim == [384, 128, 64] and meta.max_tokens == 128
    assert meta.similarity_fn_name.value == "cosine"
    assert meta.adapted_from == "sentence-transformers/all-MiniLM-L6-v2"


def test_mteb_eval_uses_the_exports_model_meta(export):
    from neoembed.evaluation.models import EvalSettings, load_model, resolve_model

    settings = EvalSettings(max_length=128)
    spec = resolve_model(str(export), settings)
    assert spec.meta.name == "local/tiny-embed" and spec.meta.training_datasets == {"MSMARCO"}
    assert spec.meta.experiment_kwargs == settings.scoring_settings()
    assert spec.meta.revision and spec.meta.revision != "unknown"
    wrapper = load_model(spec, settings)
    assert wrapper.mteb_model_meta.training_datasets == {"MSMARCO"}
    assert wrapper.mteb_model_meta.embed_dim == [384, 128, 64]
    # The cache identity of the weights does not depend on the metadata file.
    (export / "mteb_model_meta.json").rename(export.parent / "meta.bak")
    try:
        assert resolve_model(str(export), settings).meta.revision == spec.meta.revision
    finally:
        (export.parent / "meta.bak").rename(export / "mteb_model_meta.json")
