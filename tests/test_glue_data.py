"""GLUE data loading, recipe validation and tokenizer checks: formats, layouts, and clear errors."""

import json
from pathlib import Path

import pytest

from neoembed.glue import GlueError, GlueSettings, load_settings
from neoembed.glue.data import load_task_data
from neoembed.glue.model import load_glue_model, load_glue_tokenizer
from neoembed.glue.tasks import TASKS

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "glue.yaml"


def _write(path: Path, rows: list[dict]) -> Path:
    """Write rows as csv, tsv, jsonl or parquet, by suffix."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".parquet":
        frame.to_parquet(path)
    else:
        frame.to_csv(path, sep="\t" if path.suffix == ".tsv" else ",", index=False)
    return path


def test_local_formats_label_names_and_numeric_text(tmp_path):
    rows = [
        {"sentence1": "1990", "sentence2": "a year", "label": "entailment"},
        {"sentence1": "NA", "sentence2": "not a number", "label": "not_entailment"},
        {"sentence1": "x", "sentence2": "y", "label": 1},
    ]
    _write(tmp_path / "rte" / "train.csv", rows)
    _write(tmp_path / "rte" / "validation.jsonl", [{**r, "label": str(r["label"])} for r in rows])
    data = load_task_data(TASKS["rte"], tmp_path)
    assert data["train"]["sentence1"] == ["1990", "NA", "x"]  # stays text, not a number or a missing value
    assert data["train"]["label"] == [0, 1, 1] == data["validation"]["label"]
    assert data["train"].features["label"].dtype == "int64"

    _write(tmp_path / "flat" / "train.parquet", [{"sentence1": "a", "sentence2": "b", "label": 2.5}])
    _write(tmp_path / "flat" / "validation.tsv", [{"sentence1": "a", "sentence2": "b", "label": 4}])
    data = load_task_data(TASKS["stsb"], tmp_path / "flat")  # files directly in the directory
    assert data["validation"]["label"] == [4.0] and data["train"].features["label"].dtype == "float32"


def test_sampling_is_seeded(tmp_path):
    rows = [{"sentence": f"s{i}", "label": i % 2} for i in range(50)]
    _write(tmp_path / "train.tsv", rows)
    _write(tmp_path / "validation.tsv", rows)
    first = load_task_data(TASKS["sst2"], tmp_path, max_train_samples=10, seed=1)
    again = load_task_data(TASKS["sst2"], tmp_path, max_train_samples=10, seed=1)
    assert len(first["train"]) == 10 and len(first["validation"]) == 50
    assert first["train"]["sentence"] == again["train"]["sentence"]


@pytest.mark.parametrize(
    ("task", "rows", "message"),
    [
        (
            "sst2",
            [{"sentence": "ok", "label": 1}, {"sentence": "hm", "label": 3.5}],
            r"row 2: label 3\.5 .*sst2",
        ),
        ("rte", [{"sentence1": "a", "sentence2": "b", "label": 2}], r"row 1: label 2 .*0=entailment"),
        ("rte", [{"sentence1": "a", "sentence2": "b", "label": "neutral"}], "row 1: label 'neutral'"),
        (
            "mrpc",
            [{"sentence1": "a", "label": 1}],
            "needs columns sentence1, sentence2, label; missing sentence2",
        ),
        (
            "stsb",
            [{"sentence1": "a", "sentence2": "b", "label": "high"}],
            "row 1: label 'high' is not a number",
        ),
        ("cola", [{"sentence": "a", "score": 1}], "missing label"),
    ],
)
def test_labels_and_columns_that_do_not_fit_the_task(tmp_path, task, rows, message):
    train = _write(tmp_path / "train.jsonl", rows)
    _write(tmp_path / "validation.jsonl", rows)
    with pytest.raises(GlueError, match=message) as err:
        load_task_data(TASKS[task], tmp_path)
    assert str(train) in str(err.value)  # names the file


def test_missing_split_file_is_named(tmp_path):
    rows = [{"premise": "a", "hypothesis": "b", "label": 0}]
    _write(tmp_path / "mnli" / "train.tsv", rows)
    _write(tmp_path / "mnli" / "validation_matched.tsv", rows)
    with pytest.raises(GlueError, match="no file for split 'validation_mismatched' of task mnli"):
        load_task_data(TASKS["mnli"], tmp_path)
    with pytest.raises(GlueError, match="does not exist"):
        load_task_data(TASKS["mnli"], tmp_path / "nowhere")


def test_hub_loading_offline_says_what_to_do():
    with pytest.raises(GlueError, match="(?s)nyu-mll/glue.*Offline.*--data-dir"):
        load_task_data(TASKS["wnli"])  # HF_DATASETS_OFFLINE=1 in conftest: no hub


def test_recipe_is_the_paper_protocol_and_the_defaults():
    recipe = load_settings(RECIPE)
    assert recipe == GlueSettings()
    assert (recipe.optim.betas, recipe.optim.warmup_steps, recipe.train.max_epochs) == ((0.9, 0.95), 0.06, 10)
    assert recipe.train.precision == "fp32" and recipe.optim.eps == 1e-8
    points = recipe.points(grid=True)
    assert len(points) == 4 * 5 * 2 and len(set(points)) == 40
    assert {p.batch_size for p in points} == {4, 8, 16, 32}
    assert {p.learning_rate for p in points} == {5e-6, 6e-6, 1e-5, 2e-5, 3e-5}
    assert {p.weight_decay for p in points} == {1e-2, 1e-5}
    assert recipe.points(grid=False)[0].slug == "bs32-lr2e-05-wd0.01"
    assert "wnli" not in recipe.tasks and recipe.transfer.tasks == ["rte", "mrpc", "stsb"]


def test_recipe_errors_name_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    for text, message in [
        ("max_epoch: 3\n", "field max_epoch: unknown field"),
        ("grid: {batch_size: [0, 8]}\n", r"field grid\.batch_size\.0: Input should be greater than 0"),
        ("optim: {lr: fast}\n", "field optim.lr: Input should be a valid number"),
        ("transfer: {tasks: [rte, sst3]}\n", "field transfer.tasks: .*unknown GLUE task 'sst3'"),
        ("- 1\n", "expected a mapping of fields"),
    ]:
        bad.write_text(text)
        with pytest.raises(GlueError, match=message):
            load_settings(bad)
    with pytest.raises(GlueError, match="field train.early_stopping_patience"):
        load_settings(overrides={"train.early_stopping_patience": 0})
    assert load_settings(overrides={"transfer.enabled": False}).transfer.tasks == ["rte", "mrpc", "stsb"]


@pytest.fixture(scope="module")
def no_tokenizer_model(tmp_path_factory):
    from neoembed.pretrain.neobert import NeoBERTModel, tiny_config

    path = tmp_path_factory.mktemp("neobert-no-tokenizer")
    NeoBERTModel(tiny_config(num_hidden_layers=1, hidden_size=32, num_attention_heads=2)).save_pretrained(
        path
    )
    return path


def test_model_without_tokenizer(no_tokenizer_model, minilm_path):
    with pytest.raises(GlueError, match="no usable tokenizer.*--tokenizer"):
        load_glue_tokenizer(str(no_tokenizer_model))
    tokenizer = load_glue_tokenizer(str(no_tokenizer_model), str(minilm_path))  # bert-base-uncased vocab
    assert tokenizer.cls_token_id == 101


def test_tokenizer_larger_than_the_model_vocabulary(tmp_path, minilm_path):
    from neoembed.pretrain.neobert import NeoBERTModel, tiny_config

    NeoBERTModel(tiny_config(num_hidden_layers=1, vocab_size=1000)).save_pretrained(tmp_path)
    with pytest.raises(GlueError, match="30522 ids but model .* embeds only 1000"):
        load_glue_tokenizer(str(tmp_path), str(minilm_path))


def test_minilm_gets_a_new_bert_head(minilm_path):
    model = load_glue_model("minilm", TASKS["mnli"])
    assert type(model).__name__ == "BertForSequenceClassification"
    assert model.classifier.out_features == 3 and model.config.id2label[2] == "contradiction"
