"""End-to-end `neoembed contrastive` on tiny models: resume, export loading in fresh processes, CLI errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from test_contrastive import records, tiny_encoder_dir, write_build

from neoembed.contrastive import ContrastiveResult
from neoembed.contrastive.settings import ContrastiveSettings
from neoembed.contrastive.train import run_contrastive
from neoembed.data.normalize import text_key

ROOT = Path(__file__).resolve().parents[1]
PORTABLE = ("Transformer", "Pooling", "Normalize")
TEXTS = ["a cat sat on the mat", "definition of a word", "neoembed exports sentence embedders"]


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    root = tmp_path_factory.mktemp("build")
    return write_build(root / "out", {"alpha": records("alpha", 48), "beta": records("beta", 24)})


def recipe(build: Path, base: Path, out: Path, **train) -> dict:
    return {
        "data": {"path": str(build), "max_negatives": 2},
        "model": {"base": str(base), "max_length": 24},
        "optim": {"warmup_steps": 1, "lr": 1e-3},
        "train": {
            "output_dir": str(out),
            "max_steps": 4,
            "batch_size": 4,
            "log_steps": 1,
            "save_steps": 2,
            "threads": 1,
            **train,
        },
        "eval": {"sets": []},
    }


def loss_config(settings: ContrastiveSettings, model) -> dict:
    """The config of the loss `settings` train `model` with, as the model card reads it."""
    from neoembed.contrastive.losses import loss_class

    return loss_class(settings.loss.trained_kind).from_recipe(settings, model, world_size=1).config


def weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(run / "neobert-embed" / "model.safetensors")


@pytest.mark.parametrize("lora", [None, {"r": 4, "alpha": 8}], ids=["full", "lora"])
@pytest.mark.faults
def test_a_run_resumed_from_a_checkpoint_ends_with_the_uninterrupted_weights(
    tmp_path, build, minilm_path, lora
):
    base = tiny_encoder_dir(tmp_path, minilm_path)

    def settings(out: Path) -> ContrastiveSettings:
        plan = recipe(build, base, out)
        plan["model"]["lora"] = lora
        return ContrastiveSettings.model_validate(plan)

    straight = run_contrastive(settings(tmp_path / "a"))
    assert straight.steps == 4
    lines = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if "loss" in line] == [1, 2, 3, 4]

    crashed = tmp_path / "b"
    run_contrastive(settings(crashed))
    first = weights(crashed)
    # A crash after step 2's checkpoint: step 4's checkpoint and the export never happened.
    for lost in ("checkpoint-4", "neobert-embed"):
        import shutil

        shutil.rmtree(crashed / lost)
    resumed = run_contrastive(settings(crashed))
    assert resumed.steps == 4 and resumed.eval_before is None
    reference, again = weights(tmp_path / "a"), weights(crashed)
    assert any(
        not torch.equal(reference[k], load_file(base / "model.safetensors").get(k, reference[k]))
        for k in reference
    )  # training changed the weights
    for name, value in reference.items():
        assert torch.allclose(value, first[name], atol=1e-6), name
        assert torch.allclose(value, again[name], atol=1e-6), name


def test_running_a_finished_run_again_trains_no_further_and_exports_the_same_model(
    tmp_path, build, minilm_path
):
    plan = recipe(build, tiny_encoder_dir(tmp_path, minilm_path), tmp_path / "run", max_steps=2)
    first = run_contrastive(ContrastiveSettings.model_validate(plan))
    exported = weights(tmp_path / "run")
    again = run_contrastive(ContrastiveSettings.model_validate(plan))
    assert first.steps == again.steps == 2
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-2"]
    for name, value in weights(tmp_path / "run").items():
        assert torch.equal(value, exported[name]), name


def test_a_different_recipe_does_not_resume_a_run(tmp_path, build, minilm_path):
    from neoembed.recipes import RecipeError

    base = tiny_encoder_dir(tmp_path, minilm_path)
    settings = recipe(build, base, tmp_path / "run", max_steps=1)
    run_contrastive(ContrastiveSettings.model_validate(settings))
    settings["loss"] = {"temperature": 0.5}
    with pytest.raises(RecipeError, match="loss.temperature"):
        run_contrastive(ContrastiveSettings.model_validate(settings))


def test_every_held_out_set_is_scored_before_during_and_after_training(tmp_path, build, minilm_path):
    """WordNet and the cross-source FOLDOC set side by side: metrics.jsonl, summary, card, command output."""
    import shutil

    from typer.testing import CliRunner

    from neoembed.cli import app

    run = tmp_path / "run"
    plan = recipe(
        build, tiny_encoder_dir(tmp_path, minilm_path), run, max_steps=2, save_steps=1, eval_steps=1
    )
    small = {"queries": 6, "corpus": 20}
    plan["eval"] = {"sets": [{"kind": "wordnet", **small}, {"kind": "foldoc", **small}]}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(plan))
    result = CliRunner().invoke(app, ["contrastive", "--recipe", str(path)])
    assert result.exit_code == 0, result.output
    summary = ContrastiveResult.read(run / "summary.json")
    assert (run / "curves.png").stat().st_size > 10_000, "the curves beside the summary"

    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [line for line in lines if "eval_foldoc_cosine_ndcg@10" in line]
    assert [line["step"] for line in evals] == [0, 1, 2]  # before training, then every eval_steps
    for line in evals:
        assert line["eval_sequential_score"] == line["eval_wordnet_cosine_ndcg@10"]  # the first set decides
    for stage, line in (("eval_before", evals[0]), ("eval_after", evals[-1])):
        assert set(getattr(summary, stage)) == {"wordnet", "foldoc"}
        for name in ("wordnet", "foldoc"):
            assert getattr(summary, stage)[name]["ndcg@10"] == round(line[f"eval_{name}_cosine_ndcg@10"], 4)
    before, after = summary.eval_before["foldoc"]["ndcg@10"], summary.eval_after["foldoc"]["ndcg@10"]
    assert f"held-out foldoc: ndcg@10 {before:.4f} -> {after:.4f} (" in result.output

    card = (Path(summary.export) / "README.md").read_text()
    assert (
        "- foldoc (held-out source): a computing term -> its FOLDOC definition: a source no training build reads"
        in card
    )
    assert "(6 queries, 20 documents)" in card
    assert f"| foldoc (held-out source) | after fine-tuning | {after:.4f} |" in card
    assert_card_states_the_run(Path(summary.export), summary, build)

    # A resumed run states the scores before training from its step-0 line ...
    for lost in ("checkpoint-2", "neobert-embed"):
        shutil.rmtree(run / lost)
    resumed = run_contrastive(ContrastiveSettings.model_validate(plan))
    assert resumed.eval_before == summary.eval_before
    # ... and may score other sets than it started with, though then it cannot say what they were before.
    shutil.rmtree(run / "checkpoint-2")
    plan["eval"] = {"sets": [{"kind": "foldoc", **small}]}
    changed = run_contrastive(ContrastiveSettings.model_validate(plan))
    assert changed.eval_before is None and set(changed.eval_after) == {"foldoc"}


HIDE_NEOEMBED = """
import sys
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path = [p for p in sys.path if not p.rstrip("/").endswith(("/work/main", "{root}"))]
try:
    import neoembed
    raise SystemExit("neoembed is importable")
except ImportError:
    pass
"""

LOAD = """
import json, sys
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(sys.argv[1], trust_remote_code={remote}, device="cpu")
print(json.dumps(model.encode({texts}).tolist()))
"""


def encode_in_fresh_process(path: Path, remote: bool) -> torch.Tensor:
    code = LOAD.format(remote=remote, texts=TEXTS)
    if remote:
        code = HIDE_NEOEMBED.format(root=ROOT) + code
        command = [sys.executable, "-I", "-c", code, str(path)]  # -I: no cwd, no PYTHONPATH
    else:
        command = [sys.executable, "-c", "import neoembed\n" + code, str(path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=path.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.tensor(json.loads(done.stdout.strip().splitlines()[-1]))


def test_neobert_export_loads_with_neoembed_and_with_remote_code_without_it(tmp_path, build):
    from neoembed.pretrain.neobert import NeoBERTModel, tiny_config
    from neoembed.pretrain.neobert.tokenizer import load_tokenizer

    base = tmp_path / "neobert"
    NeoBERTModel(tiny_config()).save_pretrained(base)
    load_tokenizer(max_length=128).save_pretrained(base)
    summary = run_contrastive(
        ContrastiveSettings.model_validate(recipe(build, base, tmp_path / "run", max_steps=2))
    )
    export = Path(summary.export)
    config = json.loads((export / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "modeling.NeoBERTModel"
    card = (export / "README.md").read_text()
    assert "**2 steps**" in card and str(base) in card and "| alpha | 48 |" in card

    from sentence_transformers import SentenceTransformer

    modules = json.loads((export / "modules.json").read_text())
    assert [m["type"] for m in modules] == [f"sentence_transformers.models.{k}" for k in PORTABLE]
    loaded = SentenceTransformer(str(export), device="cpu")  # the layout sentence-transformers 5 reads too
    assert loaded.max_seq_length == 24 and loaded[1].pooling_mode == "mean"
    expected = torch.as_tensor(loaded.encode(TEXTS))
    assert torch.allclose(encode_in_fresh_process(export, remote=False), expected, atol=1e-5)
    assert torch.allclose(encode_in_fresh_process(export, remote=True), expected, atol=1e-5)


def test_cli_reports_bad_input_without_a_traceback(tmp_path, build, minilm_path):
    from transformers import GPT2Config, GPT2Model
    from typer.testing import CliRunner

    from neoembed.cli import app

    GPT2Model(GPT2Config(n_layer=1, n_embd=16, n_head=2)).save_pretrained(tmp_path / "gpt2")
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe(build, tmp_path / "gpt2", tmp_path / "run")))
    result = CliRunner().invoke(app, ["contrastive", "--recipe", str(path), "--steps", "1"])
    assert result.exit_code == 2 and "gpt2" in result.output and "encoder" in result.output
    missing = ["contrastive", "--recipe", str(path), "--data.path", str(tmp_path / "nothing")]
    result = CliRunner().invoke(app, missing)
    assert result.exit_code == 2 and "stats.json" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(app, ["contrastive", "--recipe", str(path), "--train.batch_size", "many"])
    assert result.exit_code == 2 and "field train.batch_size" in result.output
    path.write_text(yaml.safe_dump(recipe(build, tiny_encoder_dir(tmp_path, minilm_path), tmp_path / "lora")))
    lora = ["contrastive", "--recipe", str(path), "--model.lora.target_modules", "[no_such_layer]"]
    result = CliRunner().invoke(app, lora)
    assert result.exit_code == 2 and "model.lora.target_modules" in result.output, result.output
    assert "Traceback" not in result.output


def test_source_prompts_reach_training_evaluation_and_the_exported_prompt_names(tmp_path, build, minilm_path):
    from sentence_transformers import SentenceTransformer

    from neoembed.contrastive.train import build_trainer
    from neoembed.recipes import RecipeError

    base = tiny_encoder_dir(tmp_path, minilm_path)
    settings = recipe(build, base, tmp_path / "run", max_steps=1)
    settings["eval"] = {
        "sets": [{"kind": "records", "path": str(build), "source": "beta", "queries": 8, "corpus": 16}]
    }
    settings["data"]["prompts"] = {"gamma": {"query": "x"}}
    with pytest.raises(RecipeError, match="gamma"):
        run_contrastive(ContrastiveSettings.model_validate(settings))
    settings["data"]["prompts"] = {
        "default": {"query": "query: ", "document": "passage: "},
        "beta": {"query": "beta asks: "},  # its documents keep the default's prompt
    }
    summary = run_contrastive(ContrastiveSettings.model_validate(settings))
    export = Path(summary.export)
    config = json.loads((export / "config_sentence_transformers.json").read_text())
    assert config["prompts"] == {
        "query": "query: ",
        "document": "passage: ",
        "beta_query": "beta asks: ",
        "beta_document": "passage: ",
    }
    assert "beta_query" in (export / "README.md").read_text()

    trainer = build_trainer(ContrastiveSettings.model_validate(settings))  # same recipe: allowed
    (evaluator,) = trainer.evaluator.evaluators
    assert (evaluator.query_prompt, evaluator.corpus_prompt) == ("beta asks: ", "passage: ")
    exported = SentenceTransformer(str(export), device="cpu")
    for source, query_name in (("alpha", "query"), ("beta", "beta_query")):
        rows = [trainer.train_dataset[source][i] for i in range(3)]
        features, keys = trainer.collect_features(trainer.data_collator(rows))
        columns = ("query", "positive", "negative_1", "negative_2")
        assert [k.tolist() for k in keys] == [[text_key(r[c]) for r in rows] for c in columns]
        prompted = trainer.model.tokenize([config["prompts"][query_name] + r["query"] for r in rows])
        assert torch.equal(features[0]["input_ids"], prompted["input_ids"])  # training saw the prompt
        negatives = trainer.model.tokenize(["passage: " + r["negative_1"] for r in rows])
        assert torch.equal(features[2]["input_ids"], negatives["input_ids"])
        with torch.no_grad():  # the export's embedding of the tokens training fed the loss ...
            trained = exported(features[0])["sentence_embedding"]
        # ... is what encode(prompt_name=...) gives for the raw query
        encoded = exported.encode([r["query"] for r in rows], prompt_name=query_name, convert_to_tensor=True)
        assert torch.allclose(trained, encoded, atol=1e-5)
        plain = exported.encode([r["query"] for r in rows], convert_to_tensor=True)
        assert not torch.allclose(trained, plain, atol=1e-3)  # the prompt changes the embedding


def tiny_neobert_dir(root: Path) -> Path:
    from neoembed.pretrain.neobert import NeoBERTModel, tiny_config
    from neoembed.pretrain.neobert.tokenizer import load_tokenizer

    base = root / "neobert"
    NeoBERTModel(tiny_config()).save_pretrained(base)
    load_tokenizer(max_length=128).save_pretrained(base)
    return base


@pytest.mark.parametrize(
    "kind, targets", [("minilm", {"query", "value"}), ("neobert", {"qkv", "wo", "w12", "w3"})]
)
def test_lora_trains_only_adapters_and_the_export_merges_them(tmp_path, build, minilm_path, kind, targets):
    from sentence_transformers import SentenceTransformer

    from neoembed.contrastive.lora import add_lora
    from neoembed.contrastive.model import build_model
    from neoembed.contrastive.settings import LoraSettings

    base = minilm_path if kind == "minilm" else tiny_neobert_dir(tmp_path)
    model = build_model(str(base), "mean", 24)
    add_lora(model, LoraSettings(r=4, alpha=8))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in n for n in trainable)
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable} == targets

    settings = recipe(build, base, tmp_path / "run", max_steps=2)
    settings["model"]["lora"] = {"r": 4, "alpha": 8}
    export = Path(run_contrastive(ContrastiveSettings.model_validate(settings)).export)
    checkpoint = tmp_path / "run" / "checkpoint-2"
    assert (checkpoint / "adapter_model.safetensors").exists()  # checkpoints hold the adapter only
    assert not (export / "adapter_config.json").exists()
    assert "LoRA adapters (r 4, alpha 8.0) merged" in (export / "README.md").read_text()

    unmerged = SentenceTransformer(str(checkpoint), device="cpu")  # base + adapter, as trained
    assert any(".lora_" in n for n, _ in unmerged.named_parameters())
    merged = SentenceTransformer(str(export), device="cpu")
    assert not any(".lora_" in n for n, _ in merged.named_parameters())
    expected = torch.as_tensor(unmerged.encode(TEXTS))
    assert torch.allclose(torch.as_tensor(merged.encode(TEXTS)), expected, atol=1e-5)

    before, after = load_file(base / "model.safetensors"), weights(tmp_path / "run")
    assert after.keys() <= before.keys()  # the base's weights, no adapter tensors
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed and all(k.rsplit(".", 2)[-2] in targets for k in changed)  # only adapted layers moved


def test_matryoshka_runs_report_each_dimension_and_export_the_full_one(tmp_path, build, minilm_path):
    from sentence_transformers import SentenceTransformer

    from neoembed.recipes import RecipeError

    base = tiny_encoder_dir(tmp_path, minilm_path)  # 32-dimensional
    settings = recipe(build, base, tmp_path / "run", max_steps=1)
    settings["eval"] = {
        "sets": [{"kind": "records", "path": str(build), "source": "beta", "queries": 8, "corpus": 16}]
    }
    settings["loss"] = {"matryoshka_dims": [64, 16]}
    with pytest.raises(RecipeError, match="64 exceeds the model's 32-dimensional"):
        run_contrastive(ContrastiveSettings.model_validate(settings))
    settings["loss"] = {"matryoshka_dims": [32, 16, 8], "mini_batch_size": 2}
    summary = run_contrastive(ContrastiveSettings.model_validate(settings))
    for stage in ("eval_before", "eval_after"):
        assert {"ndcg@10", "ndcg@10_dim16", "ndcg@10_dim8"} <= getattr(summary, stage)["beta"].keys()
        assert "ndcg@10_dim32" not in getattr(summary, stage)["beta"]  # the full dimension is scored once
    export = Path(summary.export)
    card = (export / "README.md").read_text()
    assert "Matryoshka embeddings at 32, 16, 8 dimensions" in card and "ndcg@10_dim8" in card
    assert_card_states_the_run(export, summary, build)
    model = SentenceTransformer(str(export), device="cpu")
    assert model.truncate_dim is None and model.encode(TEXTS).shape == (len(TEXTS), 32)
    short = SentenceTransformer(str(export), device="cpu", truncate_dim=8).encode(TEXTS)
    assert short.shape == (len(TEXTS), 8)


def assert_card_states_the_run(export: Path, summary, build: Path) -> None:
    """The export's README is sentence-transformers' card with neoembed's facts about the run."""
    from huggingface_hub import ModelCard

    card = ModelCard.load(export / "README.md")
    assert card.data.library_name == "sentence-transformers" and {"neoembed", "infonce"} <= set(
        card.data.tags
    )
    text = card.text
    # the library's sections (evaluator results, dataset statistics, hyperparameters), neoembed's before them
    assert (
        text.index("## Evaluation")
        < text.index("## Training with neoembed")
        < text.index("## Training Details")
    )
    assert "### Training Hyperparameters" in text and "text_key" not in text  # keys are no model input
    assert f"for **{summary.steps} steps**" in text and f"Records: `{build}`" in text
    assert "| alpha | 48 |\n| beta | 24 |\n| **total** | **72** |" in text
    assert "Input limit:" in text and "with seed 0" in text and "### Recipe (seed 0)" in text
    for set_name, after in summary.eval_after.items():
        before = summary.eval_before[set_name]
        # The builds here hold sources alpha and beta: the WordNet and FOLDOC sets come from held-out sources.
        name = set_name if set_name in ("alpha", "beta") else f"{set_name} (held-out source)"
        assert f"| {name} | before fine-tuning | {before['ndcg@10']:.4f} | {before['recall@1']:.4f} |" in text
        assert f"| {name} | after fine-tuning | {after['ndcg@10']:.4f} | {after['recall@1']:.4f} |" in text
        assert f"| {name} | relative change | " in text
    recipe_yaml = text.split("### Recipe (seed 0)\n```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(recipe_yaml)["train"]["max_steps"] == summary.steps


def test_a_hub_base_model_is_the_cards_base_model(tmp_path, build, minilm_path):
    from huggingface_hub import ModelCard

    from neoembed.contrastive.model import build_model
    from neoembed.contrastive.model_card import model_card, training_facts

    settings = ContrastiveSettings.model_validate(recipe(build, "minilm", tmp_path / "run"))
    model = build_model(str(tiny_encoder_dir(tmp_path, minilm_path)), "mean", 24)
    facts = training_facts(
        settings, loss_config(settings, model), model, {"alpha": range(48)}, steps=0, before=None, after={}
    )
    card = ModelCard(model_card(model, facts))
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert "from **sentence-transformers/all-MiniLM-L6-v2**" in card.text
    assert "No held-out evaluation was run" in card.text


def test_the_card_puts_before_and_after_side_by_side_per_set_and_marks_a_drop(tmp_path, minilm_path):
    from neoembed.contrastive.model import build_model
    from neoembed.contrastive.model_card import neoembed_section, training_facts

    settings = ContrastiveSettings.model_validate({"data": {"path": "d"}})
    model = build_model(str(tiny_encoder_dir(tmp_path, minilm_path)), "mean", 24)
    before = {"wordnet": {"ndcg@10": 0.343}, "foldoc": {"ndcg@10": 0.684}}  # issue 17's numbers
    after = {"wordnet": {"ndcg@10": 0.351}, "foldoc": {"ndcg@10": 0.657}}
    heldout = {"wordnet": "WordNet examples", "foldoc": "FOLDOC terms"}
    facts = training_facts(
        settings, loss_config(settings, model), model, {"wordnet": range(8)}, 119, before, after, heldout
    )
    section = neoembed_section(facts, {})
    assert "| foldoc (held-out source) | before fine-tuning | 0.6840 | - | - | - |" in section
    assert "| foldoc (held-out source) | after fine-tuning | 0.6570 | - | - | - |" in section
    assert "| foldoc (held-out source) | relative change | **-3.9%** | - | - | - |" in section
    assert "| wordnet | relative change | +2.3% | - | - | - |" in section


def test_the_card_marks_held_out_sources_and_states_seed_precision_and_input_limit(tmp_path, minilm_path):
    from neoembed.contrastive.model import build_model
    from neoembed.contrastive.model_card import neoembed_section, training_facts

    settings = ContrastiveSettings.model_validate(
        {"data": {"path": "d"}, "train": {"seed": 7, "precision": "fp32"}}
    )
    model = build_model(str(tiny_encoder_dir(tmp_path, minilm_path)), "mean", 24)
    scores = {"wordnet": {"ndcg@10": 0.3}, "foldoc": {"ndcg@10": 0.6}}
    heldout = {"wordnet": "WordNet examples", "foldoc": "FOLDOC terms"}
    facts = training_facts(
        settings,
        loss_config(settings, model),
        model,
        {"wordnet": range(30), "qqp": range(12)},
        5,
        scores,
        scores,
        heldout,
    )
    assert facts.heldout_sources == ["foldoc"], "WordNet trained; FOLDOC never does"
    section = neoembed_section(facts, {})
    assert "| foldoc (held-out source) | after fine-tuning | 0.6000 |" in section
    assert "| wordnet | after fine-tuning | 0.3000 |" in section
    assert "| wordnet | 30 |\n| qqp | 12 |\n| **total** | **42** |" in section
    assert "**Input limit:\n24 tokens**" in section
    assert "Trained in\nfp32 with seed 7; the exported weights are float32." in section
    assert "### Recipe (seed 7)" in section


DDP_WORKER = """
import json, sys
import torch
from neoembed.contrastive.settings import ContrastiveSettings
from neoembed.contrastive.train import run_contrastive
from neoembed.training import release_process_group

torch.set_num_threads(1)
run_contrastive(ContrastiveSettings.model_validate(json.loads(sys.argv[1])))
release_process_group()
"""


def test_two_gloo_ranks_train_a_base_whose_pooler_gets_no_gradient(tmp_path, build, minilm_path):
    """A BERT base's pooler is unused by mean pooling: DDP must be told to look for unused parameters."""
    import os

    base = tiny_encoder_dir(tmp_path, minilm_path)
    plan = recipe(build, base, tmp_path / "run", max_steps=3, save_steps=3)
    worker = tmp_path / "worker.py"
    worker.write_text(DDP_WORKER)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*command, str(worker), json.dumps(plan)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in logged if "loss" in line] == [1, 2, 3]  # written by the main rank only
    assert (tmp_path / "run" / "neobert-embed" / "model.safetensors").exists()


def test_export_base_weight_averages_the_fine_tuned_weights_with_the_base(tmp_path, build, minilm_path):
    """WiSE-FT: with export.base_weight 0.25 the export holds 0.75 x the fine-tuned + 0.25 x the base weights
    (the same seeded run without it gives the fine-tuned ones), and card and metrics say so."""
    base_dir = tiny_encoder_dir(tmp_path, minilm_path)
    plan = recipe(build, base_dir, tmp_path / "plain", max_steps=2)
    run_contrastive(ContrastiveSettings.model_validate(plan))
    tuned = weights(tmp_path / "plain")
    run = tmp_path / "averaged"
    plan = recipe(build, base_dir, run, max_steps=2)
    plan["eval"] = {"sets": [{"kind": "foldoc", "queries": 6, "corpus": 20}]}
    plan["export"] = {"base_weight": 0.25}
    summary = run_contrastive(ContrastiveSettings.model_validate(plan))
    base = load_file(next(base_dir.rglob("model.safetensors")))
    averaged = weights(run)
    moved = 0
    for name, value in averaged.items():
        start = base[name.removeprefix("0.auto_model.")] if name not in base else base[name]
        torch.testing.assert_close(value, 0.75 * tuned[name] + 0.25 * start)
        moved += not torch.equal(tuned[name], start)
    assert moved  # training changed the weights, so the average is a third point
    card = (run / "neobert-embed" / "README.md").read_text()
    assert "0.75 x the fine-tuned weights + 0.25 x the base model's" in card
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert (
        last["base_weight"] == 0.25
        and round(last["eval_foldoc_cosine_ndcg@10"], 4) == (summary.eval_after["foldoc"]["ndcg@10"])
    )


def test_base_pull_keeps_the_weights_nearer_their_start_and_is_logged(tmp_path, build, minilm_path):
    """loss.base_pull (L2-SP): the same seeded run with a strong pull ends nearer the base weights, and its
    log carries the pull beside the InfoNCE term, their sum being the loss."""
    base_dir = tiny_encoder_dir(tmp_path, minilm_path)
    base = load_file(next(base_dir.rglob("model.safetensors")))

    def distance(run: Path) -> float:
        tuned = weights(run)
        return sum(
            float(((v - base[n.removeprefix("0.auto_model.")]) ** 2).sum())
            for n, v in tuned.items()
            if n.removeprefix("0.auto_model.") in base
        )

    run_contrastive(
        ContrastiveSettings.model_validate(recipe(build, base_dir, tmp_path / "free", max_steps=12))
    )
    pulled = recipe(build, base_dir, tmp_path / "pulled", max_steps=12)
    pulled["loss"] = {"base_pull": 10.0}
    run_contrastive(ContrastiveSettings.model_validate(pulled))
    assert distance(tmp_path / "pulled") < 0.5 * distance(tmp_path / "free")
    logged = [json.loads(line) for line in (tmp_path / "pulled" / "metrics.jsonl").read_text().splitlines()]
    steps = [line for line in logged if "loss" in line]
    assert steps and steps[-1]["base_pull"] > 0
    assert all(line["infonce"] + line["base_pull"] == pytest.approx(line["loss"], rel=1e-3) for line in steps)


def test_distilling_from_base_uses_the_model_being_fine_tuned_as_teacher(tmp_path, build, minilm_path):
    """loss.distill.teacher `base`: the teacher cache is the base model's own embeddings, and the card says so."""
    base_dir = tiny_encoder_dir(tmp_path, minilm_path)
    plan = recipe(build, base_dir, tmp_path / "run", max_steps=2)
    plan["loss"] = {"distill": {"teacher": "base", "batch_size": 32}}
    run_contrastive(ContrastiveSettings.model_validate(plan))
    manifest = json.loads((tmp_path / "run" / "teacher" / "manifest.json").read_text())
    assert manifest["teacher"] == str(base_dir) and manifest["dimension"] == 32
    card = (tmp_path / "run" / "neobert-embed" / "README.md").read_text()
    assert "the base model before training" in card


def auto_recipe(build: Path, base: Path, out: Path, general: list) -> dict:
    plan = recipe(build, base, out, max_steps=2)
    plan["export"] = {
        "base_weight": "auto",
        "base_weights": [0.0, 0.5, 1.0],
        "selection": {"in_domain": 8, "general": general},
    }
    return plan


def test_auto_base_weight_is_chosen_on_the_selection_split_and_recorded(tmp_path, build, minilm_path):
    """export.base_weight auto: each candidate scored on in-domain rows held out of training and on general
    text, the best kept and exported, the curve in summary.json, metrics.jsonl and the card."""
    general = write_build(tmp_path / "general", {"gamma": records("gamma", 24)})
    base_dir = tiny_encoder_dir(tmp_path, minilm_path)
    run = tmp_path / "run"
    plan = auto_recipe(build, base_dir, run, [{"kind": "records", "path": str(general), "source": "gamma"}])
    summary = run_contrastive(ContrastiveSettings.model_validate(plan))

    curve = summary.selection
    assert [point["base_weight"] for point in curve] == [0.0, 0.5, 1.0]
    for point in curve:
        assert point["score"] == pytest.approx((point["in_domain"] + point["general"]) / 2)
        assert point["in_domain"] == pytest.approx((point["ndcg@10 alpha"] + point["ndcg@10 beta"]) / 2)
        assert point["general"] == pytest.approx(point["ndcg@10 gamma"])
    best = max(curve, key=lambda p: (round(p["score"], 6), -p["base_weight"]))
    assert summary.base_weight == best["base_weight"]
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["selection"]["base_weight"] for line in logged if "selection" in line] == [0.0, 0.5, 1.0]
    card = (run / "neobert-embed" / "README.md").read_text()
    assert "chosen on a selection split (in-domain and general" in card and "(kept)" in card
    # the 8 selection rows of each source (and rows sharing their texts) left training
    recorded = json.loads((run / "summary.json").read_text())
    assert recorded["selection"] == curve
    assert "| alpha | 40 |\n| beta | 16 |" in card


def test_in_domain_sets_count_with_the_in_domain_rows(tmp_path, build, minilm_path):
    """export.selection.in_domain_sets (`neoembed adapt`'s held-out documents' pairs): scored beside the rows
    held out of each source, in the in-domain half, the general sets the other half."""
    general = write_build(tmp_path / "general", {"gamma": records("gamma", 24)})
    held = write_build(tmp_path / "held", {"delta": records("delta", 24)})
    plan = auto_recipe(
        build,
        tiny_encoder_dir(tmp_path, minilm_path),
        tmp_path / "run",
        [{"kind": "records", "path": str(general), "source": "gamma"}],
    )
    plan["export"]["selection"]["in_domain_sets"] = [
        {"kind": "records", "path": str(held), "source": "delta"}
    ]
    summary = run_contrastive(ContrastiveSettings.model_validate(plan))
    for point in summary.selection:
        alpha, beta, delta = (point[f"ndcg@10 {name}"] for name in ("alpha", "beta", "delta"))
        assert point["in_domain"] == pytest.approx((alpha + beta + delta) / 3)
        assert point["score"] == pytest.approx((point["in_domain"] + point["ndcg@10 gamma"]) / 2)


@pytest.mark.parametrize(
    "curve, kept, scored",
    [
        ({0.0: 0.80, 0.1: 0.81, 0.2: 0.79, 0.3: 0.78, 0.4: 0.90}, 0.1, 4),  # past its peak: 0.4 never scored
        ({0.0: 0.80, 0.1: 0.79, 0.2: 0.81, 0.3: 0.78, 0.4: 0.77}, 0.2, 5),  # one dip does not end the scan
        ({0.0: 0.80, 0.1: 0.80, 0.2: 0.80}, 0.0, 3),  # among equals the smallest weight
    ],
)
def test_the_base_weight_scan_stops_two_candidates_past_the_best(monkeypatch, curve, kept, scored):
    from neoembed.contrastive import selection

    class Mix:  # stands in for the weight mix: its "model" is the weight applied
        model, tuned = None, "final"

        def apply(self, weight):
            self.model = weight

    monkeypatch.setattr(
        selection,
        "retrieval_evaluator",
        lambda name, *_: lambda weight: {f"{name}_cosine_ndcg@10": curve[weight]},
    )
    split = selection.SelectionSplit(general={"set": selection.SelectionSet(({}, {}, {}), None)})
    logged = []
    choice = selection.choose_export(Mix(), split, list(curve), [(4, None)], {}, 8, logged.append)
    assert choice.base_weight == kept and len(choice.curve) == len(logged) == scored
    assert choice.step == 4 and {point["step"] for point in choice.curve} == {4}


def test_an_earlier_checkpoint_that_scores_higher_is_kept_with_its_own_weights(monkeypatch):
    """export.checkpoints all: each checkpoint scans the weights with its own patience; the best (checkpoint,
    weight) is kept and the mix left holding that checkpoint's weights, not the last one read."""
    from neoembed.contrastive import selection

    scores = {  # (checkpoint, base weight) -> score: step 100 peaks highest, at 0.1
        ("final", 0.0): 0.80, ("final", 0.1): 0.79, ("final", 0.2): 0.78,
        (100, 0.0): 0.81, (100, 0.1): 0.83, (100, 0.2): 0.82, (100, 0.3): 0.80,
        (50, 0.0): 0.70, (50, 0.1): 0.69, (50, 0.2): 0.68,
    }  # fmt: skip

    class Mix:  # stands in for the weight mix: "tuned" names the checkpoint, "model" what is applied
        tuned, model = "final", None

        def retune(self, state):
            self.tuned = state

        def apply(self, weight):
            self.model = (self.tuned, weight)

    monkeypatch.setattr(
        selection,
        "retrieval_evaluator",
        lambda name, *_: lambda applied: {f"{name}_cosine_ndcg@10": scores[applied]},
    )
    split = selection.SelectionSplit(general={"set": selection.SelectionSet(({}, {}, {}), None)})
    mix = Mix()
    tuned = [(200, None), (100, lambda: 100), (50, lambda: 50)]
    choice = selection.choose_export(mix, split, [0.0, 0.1, 0.2, 0.3, 0.4], tuned, {}, 8, lambda _: None)
    assert (choice.step, choice.base_weight) == (100, 0.1) and mix.tuned == 100
    scanned = [(point["step"], point["base_weight"]) for point in choice.curve]
    assert scanned == [(200, 0.0), (200, 0.1), (200, 0.2), (100, 0.0), (100, 0.1), (100, 0.2), (100, 0.3)] + [
        (50, 0.0),
        (50, 0.1),
        (50, 0.2),
    ]


def test_checkpoints_all_exports_the_chosen_checkpoint_mixed_with_the_base(tmp_path, build, minilm_path):
    """export.checkpoints all on a run that kept checkpoints 2 and 4: both scanned, the choice recorded, and
    the exported weights are exactly the chosen checkpoint's mixed at the chosen base weight."""
    general = write_build(tmp_path / "general", {"gamma": records("gamma", 24)})
    base_dir = tiny_encoder_dir(tmp_path, minilm_path)
    run = tmp_path / "run"
    plan = auto_recipe(build, base_dir, run, [{"kind": "records", "path": str(general), "source": "gamma"}])
    plan["train"]["max_steps"] = 4
    plan["export"] |= {"checkpoints": "all", "base_weights": [0.0, 0.5]}
    summary = run_contrastive(ContrastiveSettings.model_validate(plan))

    assert {point["step"] for point in summary.selection} == {4, 2}
    best = max(summary.selection, key=lambda p: round(p["score"], 6))  # the first of equals
    assert (summary.exported_step, summary.base_weight) == (best["step"], best["base_weight"])
    tuned = load_file(run / f"checkpoint-{summary.exported_step}" / "model.safetensors")
    base = load_file(base_dir / "model.safetensors")
    exported = weights(run)
    for name, tensor in exported.items():
        expected = tuned[name].lerp(base[name], summary.base_weight)
        torch.testing.assert_close(tensor, expected)
    card = (run / "neobert-embed" / "README.md").read_text()
    assert "The checkpoint and the base model's share was chosen" in card and "step 2: " in card


@pytest.mark.parametrize(
    "change, message",
    [
        ({"export": {"checkpoints": "all"}}, "set base_weight auto"),
        (
            {"export": {"checkpoints": "all", "base_weight": "auto"}, "model": {"lora": {"r": 4}}},
            "LoRA run's checkpoints hold its adapters only",
        ),
    ],
)
def test_checkpoints_all_needs_the_selection_and_whole_weights(tmp_path, change, message):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=message):
        ContrastiveSettings.model_validate({"data": {"path": str(tmp_path)}, **change})


@pytest.mark.parametrize("setting", ["general", "in_domain_sets"])
@pytest.mark.parametrize(
    "sets, message",
    [
        ([{"kind": "records", "path": "BUILD", "source": "alpha"}], "texts are also training texts"),
        (["foldoc"], "texts are also evaluation texts"),
    ],
)
def test_a_selection_set_overlapping_training_or_evaluation_data_is_refused_with_the_count(
    tmp_path, build, minilm_path, sets, message, setting
):
    from neoembed.recipes import RecipeError

    sets = [dict(s, path=str(build)) if isinstance(s, dict) else s for s in sets]
    plan = auto_recipe(build, tiny_encoder_dir(tmp_path, minilm_path), tmp_path / "run", [])
    plan["export"]["selection"][setting] = sets
    with pytest.raises(RecipeError, match=message) as refused:
        run_contrastive(ContrastiveSettings.model_validate(plan))
    assert f"export.selection.{setting} " in str(refused.value)
    assert not (tmp_path / "run" / "neobert-embed").exists()


@pytest.mark.parametrize(
    "export", [{"base_weight": 1.5}, {"base_weight": -0.1}, {"base_weights": [0.2, 1.2]}]
)
def test_an_interpolation_weight_outside_0_1_is_a_settings_error(tmp_path, export):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="export.base_weight"):
        ContrastiveSettings.model_validate({"data": {"path": str(tmp_path)}, "export": export})
