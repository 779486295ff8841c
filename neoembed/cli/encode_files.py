"""`neoembed encode`'s settings, texts and outputs: text files in, .npy/.jsonl out, a similarity table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import ConfigDict, Field, field_validator

from neoembed.compilation import InferenceCompile
from neoembed.recipes import StrictSettings

OUTPUT_FORMATS = (".npy", ".jsonl")


class EncodeSettings(StrictSettings):
    """What `neoembed encode` can be told besides its texts; each field is the option of the same name."""

    model_config = ConfigDict(frozen=True)

    model: str = "minilm"
    """Embedder: a sentence-transformers directory, hub id, or minilm."""
    file: Path | None = None
    """A text file, one text per line."""
    output: Path | None = None
    """Write the embeddings here (.npy, or .jsonl with the texts)."""
    batch_size: int = Field(32, ge=1)
    """Texts per encoding batch."""
    normalize: bool = True
    """L2-normalise the embeddings."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """auto (bfloat16 where it has hardware, else float32; checked against float32 on probe texts), float32,
    bfloat16 or float16."""
    compile: InferenceCompile = "auto"

    @field_validator("file")
    @classmethod
    def _existing_file(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"{path} is not a file")
        return path

    @field_validator("output")
    @classmethod
    def _known_format(cls, path: Path | None) -> Path | None:
        if path is not None and path.suffix not in OUTPUT_FORMATS:
            raise ValueError(f"{path}: use a .npy or .jsonl file")
        return path


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
        raise ValueError(f"unsupported output format {path.suffix!r} for {path}: use one of {OUTPUT_FORMATS}")


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
