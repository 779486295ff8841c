"""Verbs start without the optional packages they do not need, and name the extra of one they do need.

Each command runs in a subprocess whose imports of the blocked packages fail (a `sitecustomize` on PYTHONPATH
installs a finder that raises), as on the GPU machine of docs/benchmarks/gpu.md, which has none of them.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml
from synthetic_text import random_documents
from test_contrastive import records, tiny_encoder_dir, write_build

from neoembed.extras import OPTIONAL

ROOT = Path(__file__).resolve().parents[1]
ALL_BLOCKED = ("faiss", "fastapi", "uvicorn", "mteb", "datasets")
# As if the packages were not installed: the path finder does not see them, so `import faiss` fails with
# ModuleNotFoundError and `importlib.util.find_spec("faiss")` (how datasets probes for faiss) returns None.
BLOCKER = """
import importlib.machinery
import sys

BLOCKED = {blocked!r}


class PathFinderWithout(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            return None
        return super().find_spec(name, path, target)


sys.meta_path[:] = [
    PathFinderWithout if finder is importlib.machinery.PathFinder else finder for finder in sys.meta_path
]
"""


def neoembed(tmp_path: Path, *args: str, blocked=ALL_BLOCKED, code: str | None = None):
    site = tmp_path / f"blocked-{'-'.join(blocked)}"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(blocked)))
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "neoembed", *args]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{site}:{ROOT}", "HOME": str(tmp_path)}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)


def test_the_blocker_blocks(tmp_path):
    result = neoembed(
        tmp_path, code="import importlib.util; print(importlib.util.find_spec('mteb')); import faiss"
    )
    assert result.stdout == "None\n"
    assert result.returncode == 1 and "No module named 'faiss'" in result.stderr


def test_help_parses_its_arguments_before_torch_or_transformers_load(tmp_path):
    code = (
        "import sys\nfrom neoembed.cli import app\ntry:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('LOADED', sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    result = neoembed(tmp_path, code=code)
    assert result.returncode == 0, result.stderr
    assert "pretrain" in result.stdout and "LOADED []" in result.stdout


@pytest.mark.parametrize(
    "verb",
    [["--help"], ["bench", "encode", "--help"], ["bench", "pretrain", "--help"], ["pretrain", "--help"]]
    + [["contrastive", "--help"], ["serve", "--help"], ["index", "build", "--help"]],
)
def test_help_of_each_verb_runs_without_the_optional_packages(tmp_path, verb):
    result = neoembed(tmp_path, *verb)
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout


def test_info_runs_without_the_optional_packages(tmp_path):
    result = neoembed(tmp_path, "info")
    assert result.returncode == 0, result.stderr
    assert "torch" in result.stdout and "Attention backends" in result.stdout


def test_bench_encode_runs_without_the_optional_packages(tmp_path):
    args = ["bench", "encode", "--configs", "tiny", "--dtypes", "fp32", "--lengths", "32", "--mixed", "8,32"]
    result = neoembed(tmp_path, *args, "--repeats", "1", "--threads", "1", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "encode.json").is_file()


def test_pretrain_and_its_bench_run_with_datasets_alone(tmp_path):
    """They read their corpus through datasets (a core dependency); nothing else optional."""
    blocked = ("faiss", "fastapi", "uvicorn", "mteb")
    bench = ["bench", "pretrain", "--max-length", "32", "--token-budget", "64", "--steps", "1"]
    bench += ["--warmup-steps", "0", "--dtype", "fp32", "--threads", "1", "--out", str(tmp_path / "bench")]
    result = neoembed(tmp_path, *bench, blocked=blocked)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "bench" / "pretrain.json").is_file()

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(random_documents(100, min_words=4, max_words=20)) + "\n")
    config = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    recipe = {
        "corpus": {"files": [str(corpus)], "heldout_fraction": 0.1},
        "model": {"config": {**config, "max_length": 32}},
        "data": {"max_length": 32, "batch_size": 4},
        "train": {"output_dir": str(tmp_path / "run"), "max_steps": 2, "eval_steps": 2, "threads": 1},
    }
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    result = neoembed(tmp_path, "pretrain", "--recipe", str(tmp_path / "recipe.yaml"), blocked=blocked)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()


def test_contrastive_trains_scores_and_exports_with_datasets_alone(tmp_path, minilm_path):
    """As on the GPU machine: the held-out WordNet set needs no mteb, and the export leaves out mteb's
    ModelMeta, saying so."""
    build = write_build(tmp_path / "build", {"alpha": records("alpha", 24)})
    recipe = {
        "data": {"path": str(build)},
        "model": {"base": str(tiny_encoder_dir(tmp_path, minilm_path)), "max_length": 24},
        "optim": {"warmup_steps": 1},
        "train": {"output_dir": str(tmp_path / "run"), "max_steps": 2, "batch_size": 4, "threads": 1},
        "eval": {"sets": [{"kind": "wordnet", "queries": 4, "corpus": 16}]},
    }
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    blocked = ("faiss", "fastapi", "uvicorn", "mteb")
    result = neoembed(tmp_path, "contrastive", "--recipe", str(tmp_path / "recipe.yaml"), blocked=blocked)
    assert result.returncode == 0, result.stderr[-3000:]
    exported = tmp_path / "run" / "neobert-embed"
    assert (exported / "model.safetensors").is_file() and not (exported / "mteb_model_meta.json").exists()
    assert "mteb is not installed" in result.stderr
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert "eval_wordnet_cosine_ndcg@10" in metrics


@pytest.mark.parametrize(
    ("args", "package", "extra"),
    [
        (["serve"], "uvicorn", "serve"),
        (["search", "--index", "nowhere", "hello"], "faiss-cpu", "index"),
        (["bench", "pretrain", "--steps", "1"], "datasets", None),
    ],
)
def test_a_verb_that_needs_a_missing_package_names_it_and_its_extra(tmp_path, args, package, extra):
    result = neoembed(tmp_path, *args)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"neoembed {args[0]}") and f"package {package}," in last, result.stderr
    assert (f"neoembed[{extra}]" in last) if extra else ("dependency of neoembed" in last)
    assert "Traceback" not in result.stderr


def test_each_optional_package_is_in_the_extra_it_names():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for module, optional in OPTIONAL.items():
        if optional.extra is None:
            listed = project["dependencies"]
        else:
            listed = project["optional-dependencies"][optional.extra]
        names = {spec.split(">")[0].split("[")[0].split("=")[0].strip() for spec in listed}
        assert optional.package in names, f"{module}: {optional.package} not in {optional.extra or 'core'}"


@pytest.mark.parametrize(
    "first",
    [
        "import neoembed",
        "from transformers import AutoModel\nimport neoembed",
        "import neoembed.pretrain.neobert.modeling",
    ],
)
def test_neobert_is_registered_with_the_auto_classes_whatever_was_imported_first(tmp_path, first):
    """`import neoembed` loads no torch; the registration runs when transformers' Auto modules load."""
    code = (
        f"import sys\n{first}\n"
        "print('TORCH', 'torch' in sys.modules)\n"
        "from transformers import AutoConfig, AutoModelForMaskedLM\n"
        "from neoembed.pretrain.neobert import tiny_config\n"
        "print(type(AutoConfig.for_model('neobert')).__name__, type(AutoModelForMaskedLM.from_config(tiny_config())).__name__)"
    )
    result = neoembed(tmp_path, code=code, blocked=())
    assert result.returncode == 0, result.stderr
    assert "NeoBERTConfig NeoBERTForMaskedLM" in result.stdout
    if first == "import neoembed":
        assert "TORCH False" in result.stdout
