"""The quickstart pipeline on the embedded default.

For now: build a tiny (untrained) NeoBERT directory with the bert-base-uncased tokenizer and load it as a
sentence-transformers model next to the packaged all-MiniLM-L6-v2; encode the same sentences with both and
write their similarity matrices to `summary.md`. Pretraining, data building, fine-tuning, evaluation and
indexing join as steps when those parts land.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from neoembed.quickstart.steps import Step, run_steps

SENTENCES = [
    "A dog is running through the park.",
    "A puppy sprints across the grass.",
    "The stock market fell sharply today.",
    "Shares dropped at the close of trading.",
    "She is reading a book by the window.",
]
TINY_NEOBERT_DIR = "tiny-neobert"


def create_tiny_neobert(run_dir: Path) -> dict:
    import torch

    from neoembed.pretrain import NeoBERTModel, tiny_config
    from neoembed.pretrain.tokenizer import load_tokenizer

    out = run_dir / TINY_NEOBERT_DIR
    with torch.random.fork_rng():  # a fixed initialisation without touching the caller's RNG
        torch.manual_seed(0)
        model = NeoBERTModel(tiny_config())
    model.save_pretrained(out)
    load_tokenizer(max_length=model.config.max_length).save_pretrained(out)
    parameters = sum(p.numel() for p in model.parameters())
    return {"path": str(out), "parameters": parameters}


def encode_sentences(run_dir: Path) -> dict:
    from neoembed.embedder import load_embedder
    from neoembed.embedding_io import similarity_table

    tables = {}
    for label, name in (
        ("tiny NeoBERT (untrained)", str(run_dir / TINY_NEOBERT_DIR)),
        ("all-MiniLM-L6-v2", "minilm"),
    ):
        embedder = load_embedder(name, device="cpu")
        embeddings = embedder.encode(SENTENCES, normalize_embeddings=True)
        tables[label] = {
            "dimension": int(embeddings.shape[1]),
            "similarities": similarity_table(SENTENCES, embeddings),
        }
    return tables


def run_quickstart(run_dir: Path, console: Console | None = None) -> Path:
    """Run every step under `run_dir` (resuming finished ones) and return the path of summary.md."""
    console = console or Console()
    steps = [
        Step(
            "tiny-neobert", "create a tiny NeoBERT with the bert-base-uncased tokenizer", create_tiny_neobert
        ),
        Step("encode", "encode sentences with the tiny NeoBERT and all-MiniLM-L6-v2", encode_sentences),
    ]
    results = run_steps(steps, run_dir, console)
    lines = ["# neoembed quickstart", "", f"Run directory: `{run_dir}`", ""]
    created = results["tiny-neobert"]
    lines += [f"Tiny NeoBERT: `{created['path']}` ({created['parameters']:,} parameters).", ""]
    for label, table in results["encode"].items():
        lines += [
            f"## {label} ({table['dimension']}-dim): cosine similarities",
            "",
            "```",
            table["similarities"],
            "```",
            "",
        ]
    summary = run_dir / "summary.md"
    summary.write_text("\n".join(lines))
    console.print("\n".join(lines))
    return summary
