"""Reading texts and writing embeddings for `neoembed encode`: text files in, .npy/.jsonl out, a similarity table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def load_texts(texts: list[str], file: Path | None) -> list[str]:
    """Texts given directly plus the non-empty lines of `file`."""
    items = list(texts)
    if file is not None:
        items += [line.strip() for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    return items


def save_embeddings(path: Path, texts: list[str], embeddings: np.ndarray) -> None:
    """`.npy` for the matrix alone; `.jsonl` for one {"text", "embedding"} object per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".npy":
        np.save(path, embeddings.astype(np.float32))
    elif path.suffix == ".jsonl":
        with path.open("w", encoding="utf-8") as out:
            for text, vector in zip(texts, embeddings):
                out.write(json.dumps({"text": text, "embedding": vector.tolist()}) + "\n")
    else:
        raise ValueError(f"unsupported output format {path.suffix!r} for {path}: use .npy or .jsonl")


def similarity_table(texts: list[str], embeddings: np.ndarray, width: int = 28) -> str:
    """A plain-text cosine-similarity matrix with truncated row labels."""
    normed = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True).clip(min=1e-12)
    scores = normed @ normed.T
    labels = [t if len(t) <= width else t[: width - 1] + "…" for t in texts]
    header = " " * (width + 4) + " ".join(f"{i:>5}" for i in range(len(texts)))
    rows = [
        f"{i:>2} {labels[i]:<{width}} " + " ".join(f"{s:5.2f}" for s in scores[i]) for i in range(len(texts))
    ]
    return "\n".join([header, *rows])
