"""The design card's lines as a user types them, in order, in an empty folder (smoke sizes: only flags that set
sizes are added), and what each chooses when typed with no flags."""

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from neoembed.cli import app
from neoembed.contrastive import ContrastiveSettings
from neoembed.errors import InputError
from neoembed.packaged import resolve_recipe
from neoembed.pretrain import PretrainSettings
from neoembed.recipes import load_recipe
from neoembed.workflow import (
    MINILM_RECIPE,
    NEOBERT_RECIPE,
    PRETRAIN_RECIPE,
    RecipeChoice,
    default_contrastive_recipe,
    default_pretrained,
    ensure_data,
    pretrain_choices,
)

runner = CliRunner()

# Flags that only make each line small; none chooses a recipe, a model, data or an output.
SMOKE = {
    "pretrain": [
        *("--train.max_steps", "4", "--train.eval_steps", "4"),
        *("--train.save_steps", "4", "--train.log_steps", "4"),
    ],
    "contrastive": [
        *("--data.build.max_rows", "100", "--train.batch_size", "8"),
        *("--train.save_steps", "2", "--train.log_steps", "2", "--eval.sets", "[]"),
    ],
    "mteb-eval": ["-t", "WordNetDefinitionRetrieval"],
}
LOAD = 'from sentence_transformers import SentenceTransformer; import neoembed; print(SentenceTransformer("neobert-embed").encode(["a dog"]).shape)'


def neoembed(cwd, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "neoembed", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def card_folder(tmp_path_factory):
    """An empty folder in which the four lines ran in order; their outputs."""
    folder = tmp_path_factory.mktemp("card")
    outputs = {
        "pretrain": neoembed(folder, "pretrain", *SMOKE["pretrain"]),
        "contrastive": neoembed(folder, "contrastive", "--steps", "2", *SMOKE["contrastive"]),
        "mteb-eval": neoembed(folder, "mteb-eval", *SMOKE["mteb-eval"]),
    }
    return folder, outputs


def test_pretrain_says_it_chose_the_small_neobert_on_wordnet(card_folder):
    folder, outputs = card_folder
    first = outputs["pretrain"].splitlines()[0]
    assert first.startswith("plan: recipe pretrain-cpu (the default; --recipe neobert-stage1")
    assert "data WordNet's training synsets" in first and "output runs/pretrain-cpu/final" in first
    assert (folder / default_pretrained() / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("config", "shape"),
    [
        (
            {"max_length": 1024},
            "NeoBERT 28 x 768 (the paper's)",
        ),  # the GPU run's recipe, which once crashed here
        ({"num_hidden_layers": 4}, "NeoBERT 4 x 768"),
    ],
)
def test_pretrain_names_the_shape_of_a_config_that_gives_only_some_fields(config, shape):
    settings = load_recipe(resolve_recipe(PRETRAIN_RECIPE), PretrainSettings, {"model": {"config": config}})
    model = next(
        c for c in pretrain_choices(settings, RecipeChoice(PRETRAIN_RECIPE, False)) if c.what == "model"
    )
    assert model.value == shape


def test_contrastive_fine_tunes_that_neobert_on_the_data_it_builds(card_folder):
    folder, outputs = card_folder
    lines = outputs["contrastive"].splitlines()
    assert lines[0].startswith(f"plan: recipe {NEOBERT_RECIPE} (runs/pretrain-cpu/final is here")
    assert "model runs/pretrain-cpu/final (--model.base)" in lines[0]
    assert "data runs/data/wordnet-manpages (missing: built first; --data.path)" in lines[0]
    assert "steps 2 (--steps)" in lines[0] and "output neobert-embed (--export.path)" in lines[0]
    assert lines[1].startswith("building runs/data/wordnet-manpages first: neoembed build-data")
    assert (folder / "runs/data/wordnet-manpages/stats.json").is_file()
    assert "exported: neobert-embed" in outputs["contrastive"]


def test_mteb_eval_scores_the_export_beside_its_base_and_bm25(card_folder):
    folder, outputs = card_folder
    first = outputs["mteb-eval"].splitlines()[0]
    assert first.startswith("plan: models neobert-embed, runs/pretrain-cpu/final, bm25")
    table = outputs["mteb-eval"]
    for label in ("neobert-embed", "final", "bm25"):
        assert label in table


def test_a_retrieval_app_loads_neobert_embed_from_that_folder(card_folder):
    folder, _ = card_folder
    done = subprocess.run(
        [sys.executable, "-c", LOAD], cwd=folder, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "(1, 128)"


def test_contrastive_picks_minilm_where_no_neobert_was_pretrained(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert default_contrastive_recipe() == MINILM_RECIPE
    (tmp_path / default_pretrained()).mkdir(parents=True)
    assert default_contrastive_recipe() == NEOBERT_RECIPE


def test_mteb_eval_with_nothing_trained_here_names_what_to_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["mteb-eval"])
    assert result.exit_code == 2
    assert "run `neoembed contrastive` here first" in result.output
    assert "neobert-embed or minilm-embed" in result.output


def test_a_multi_process_launch_is_told_to_build_the_data_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "2")
    settings = load_recipe(resolve_recipe(MINILM_RECIPE), ContrastiveSettings)
    with pytest.raises(
        InputError, match="before a multi-process launch, with neoembed build-data --out runs/data"
    ):
        ensure_data(settings, print)
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_the_four_lines_at_full_size_give_an_embedder_better_than_its_base(tmp_path):
    """As typed, no size flags: 150 MLM steps, 2,000 contrastive steps, the five offline tasks."""
    neoembed(tmp_path, "pretrain")
    neoembed(tmp_path, "contrastive", "--steps", "2000")
    table = neoembed(tmp_path, "mteb-eval")
    # The score table's row (the paired-differences table below it repeats the task name): neobert-embed,
    # its base, bm25.
    row = next(
        line for line in table.splitlines() if line.startswith("| WordNetExampleDefinitionRetrieval |")
    )
    embed, base, _ = (float(cell) for cell in row.split("|")[3:6])
    assert embed > base + 10
    subprocess.run([sys.executable, "-c", LOAD], cwd=tmp_path, check=True)


def test_data_named_elsewhere_is_not_built_with_the_recipes_sources(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    overrides = {"data.path": "runs/data/wordnet"}
    settings = load_recipe(resolve_recipe(MINILM_RECIPE), ContrastiveSettings, overrides)
    ensure_data(settings, print)  # the trainer names the missing build, after taking the run's lock
    assert not (tmp_path / "runs").exists()
