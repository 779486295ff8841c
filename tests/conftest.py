"""Shared test set-up: offline hubs, few threads, fixed seeds."""

import os

# Nothing can be downloaded from a hub here; fail fast instead of retrying the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

# The suite runs in pytest-xdist workers (`-n logical` in pyproject.toml's addopts): the cores are shared among
# them, so that each worker's torch threads do not contend with another's.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // WORKERS)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(params=[False, True], ids=["no-bf16-units", "bf16-units"])
def cpu_bf16(request, monkeypatch):
    """Runs a test as on a CPU without bf16 matrix units and as on one with them, whatever this CPU has:
    `auto` precision choices are tested both ways on every machine (child processes inherit the setting)."""
    from neoembed.precision import CPU_BF16_ENV

    monkeypatch.setenv(CPU_BF16_ENV, "1" if request.param else "0")
    return request.param


@pytest.fixture(scope="session")
def minilm_path():
    """Directory of the packaged all-MiniLM-L6-v2 sentence-transformers model."""
    from neoembed.embedder import packaged_minilm_path

    return packaged_minilm_path()


@pytest.fixture(scope="module")
def neobert_dir(tmp_path_factory):
    """A tiny random NeoBERT saved with the packaged bert-base-uncased tokenizer: a loadable encoder directory."""
    from neoembed.pretrain.neobert import NeoBERTModel, tiny_config
    from neoembed.pretrain.neobert.tokenizer import load_tokenizer

    path = tmp_path_factory.mktemp("neobert")
    NeoBERTModel(tiny_config()).eval().save_pretrained(path)
    load_tokenizer(max_length=128).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def neobert_embedder(tmp_path_factory):
    """A tiny random NeoBERT exported as a sentence-transformers directory: a model that loads in a moment."""
    from sentence_transformers import SentenceTransformer

    from neoembed.pretrain.neobert import NeoBERTModel, tiny_config
    from neoembed.pretrain.neobert.tokenizer import load_tokenizer

    root = tmp_path_factory.mktemp("neobert-embedder")
    NeoBERTModel(tiny_config()).eval().save_pretrained(root / "backbone")
    load_tokenizer(max_length=128).save_pretrained(root / "backbone")
    SentenceTransformer(str(root / "backbone"), device="cpu").save(str(root / "embedder"))
    return root / "embedder"
