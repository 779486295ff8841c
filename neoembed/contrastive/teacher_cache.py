"""The teacher's output for every distinct training text, computed once per build and cached beside it: the
targets the distillation loss (`losses/distill.py`) looks up by text key.

`<data.path>/teacher-outputs/<digest>/vectors.f32` holds the teacher's embedding of each distinct text (by
`text_key`), written chunk by chunk by `neoembed.vector_file.embed_to_file`, so a killed run resumes the
encoding where it stopped; `manifest.json` says which teacher (its weights' fingerprint) embedded which texts (a
digest of their keys in row order), and the directory's name is a digest of that, so every run on the build
with the same teacher and texts (another seed, precision or learning rate) reuses it. Each run records the
outputs it trains on in `<train.output_dir>/teacher/manifest.json` and refuses other ones on resume. The
training batches already carry every text's key (the loss's labels), so the loss looks the teacher's outputs
up by key: nothing is added to the dataset.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

import numpy as np
import torch
from torch import Tensor

from neoembed.contrastive.data import text_columns
from neoembed.embedder import model_fingerprint
from neoembed.errors import RunError
from neoembed.run_files import one_writer, write_json
from neoembed.vector_file import embed_to_file

SHARED_CACHE_DIR = "teacher-outputs"  # under data.path: <digest>/vectors.f32 and manifest.json
RUN_RECORD_DIR = "teacher"  # under train.output_dir: manifest.json, the outputs the run trains on


class TeacherCacheError(RunError):
    """A resumed run whose teacher or texts changed since its checkpoints were trained."""


class DistinctTexts(Sequence):
    """Every distinct text of the training sources once (by text key), in order of first appearance going
    source by source, column by column, row by row: the rows of the teacher cache. A slice reads its texts
    from the datasets, so the texts of a large build are never in memory together."""

    def __init__(self, sources: dict, keys: dict[str, np.ndarray]) -> None:
        """`sources`: name -> training dataset; `keys`: name -> its (rows, text columns) keys."""
        self.segments = [(d, column) for d in sources.values() for column in text_columns(d)]
        flat = np.concatenate([keys[name].T.reshape(-1) for name in sources])  # one segment after another
        self.starts = np.cumsum([0] + [len(d) for d, _ in self.segments])
        unique, first = np.unique(flat, return_index=True)
        order = np.argsort(first)
        self.keys = unique[order]  # cache row -> text key
        self.positions = first[order]  # cache row -> where the text first appears (ascending)

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index):
        if isinstance(index, int):
            return self[index : index + 1][0]
        positions = self.positions[index]
        segments = np.searchsorted(self.starts, positions, side="right") - 1
        texts = []
        for segment in np.unique(segments):  # ascending, as the positions are
            dataset, column = self.segments[segment]
            rows = positions[segments == segment] - self.starts[segment]
            texts.extend(dataset.select_columns([column]).select(rows)[column])
        return texts

    def digest(self) -> str:
        return hashlib.blake2b(self.keys.astype("<i8").tobytes(), digest_size=16).hexdigest()


class TeacherTargets:
    """The teacher's embedding of every distinct training text, looked up by text key."""

    def __init__(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        """`keys[i]`: the text key of `vectors[i]`."""
        self.order = np.argsort(keys, kind="stable")
        self.sorted_keys = keys[self.order]
        self.vectors = vectors

    @property
    def dimension(self) -> int:
        return self.vectors.shape[1]

    def __call__(self, keys: Tensor) -> Tensor:
        """(len(keys), dimension) float32 teacher embeddings, on the device of `keys`."""
        wanted = keys.cpu().numpy()
        found = np.minimum(np.searchsorted(self.sorted_keys, wanted), len(self.sorted_keys) - 1)
        missing = self.sorted_keys[found] != wanted
        if missing.any():  # the cache was built from these very datasets, so this is a bug, not bad input
            raise RunError(f"{int(missing.sum())} text keys of the batch are not in the teacher cache")
        rows = self.order[found]
        return torch.from_numpy(np.ascontiguousarray(self.vectors[rows])).to(keys.device)


class TeacherIdentity(TypedDict):
    """What a teacher cache holds: which weights (and truncation) embedded which texts. Written as the cache's
    and the run's manifest.json, and hashed (all but `teacher`) into the cache's directory name."""

    teacher: str  # the recipe's name for the teacher
    fingerprint: str  # of the teacher's weights
    dimension: int
    max_length: int  # the teacher's truncation, in tokens
    texts: int  # distinct texts embedded
    keys: str  # digest of their text keys


def teacher_identity(teacher, name: str, texts: DistinctTexts) -> TeacherIdentity:
    """The identity of `teacher`'s (named `name`) embedding of `texts`."""
    return TeacherIdentity(
        teacher=name,
        fingerprint=model_fingerprint(teacher),
        dimension=teacher.get_embedding_dimension(),
        max_length=teacher.max_seq_length,
        texts=len(texts),
        keys=texts.digest(),
    )


def shared_cache_dir(root: Path, identity: TeacherIdentity) -> Path:
    """`root`/<digest of the identity>: one directory per (teacher weights, texts), whatever the teacher's
    name (`base` and `minilm` on MiniLM share it)."""
    content = {field: value for field, value in identity.items() if field != "teacher"}
    digest = hashlib.blake2b(json.dumps(content, sort_keys=True).encode(), digest_size=8).hexdigest()
    return root / digest


def teacher_cache_root(data_path: Path, output_dir: Path) -> Path:
    """Beside the build (`<data.path>/teacher-outputs`), so every run on it shares the teacher's outputs (a
    bench's seeds and precisions, the quickstart's two fine-tunes); the run's own directory where the build
    cannot be written to."""
    if os.access(data_path, os.W_OK):
        return data_path / SHARED_CACHE_DIR
    return output_dir / RUN_RECORD_DIR


def pin_teacher(record: Path, identity: TeacherIdentity, outputs: str, trained_on: bool) -> None:
    """Record in the run which teacher outputs it trains on (and where they are); refuse other ones once
    checkpoints trained on the recorded ones (a resumed run must keep its targets)."""
    if record.exists():
        recorded = json.loads(record.read_text())
        changed = [field for field, value in identity.items() if recorded.get(field) != value]
        if changed and trained_on:
            raise TeacherCacheError(
                f"{record}: this run's checkpoints were trained on other teacher outputs ({', '.join(changed)} "
                "differ; same recipe, so the files behind the names changed). Resuming would train on other "
                f"targets: use another train.output_dir, or delete {record.parent} and the checkpoints to "
                "start over."
            )
    record.parent.mkdir(parents=True, exist_ok=True)
    write_json(record, {**identity, "outputs": outputs})


def cache_teacher_outputs(
    teacher,
    identity: TeacherIdentity,
    texts: DistinctTexts,
    directory: Path,
    *,
    batch_size: int,
    chunk_rows: int,
) -> TeacherTargets:
    """The teacher's embedding of every text in `directory` (one per identity), computing what is not there
    yet. Runs that need the same outputs at once take turns: the first embeds, the next finds them done."""
    with one_writer(directory, "teacher", param="loss.distill", wait=True):
        # The manifest goes first: it describes every row written after it.
        write_json(directory / "manifest.json", identity)
        embedded = embed_to_file(
            teacher,
            texts,
            directory / "vectors.f32",
            chunk_rows=chunk_rows,
            batch_size=batch_size,
            normalize=False,
        )
    return TeacherTargets(texts.keys, embedded)


def teacher_targets(
    teacher,
    name: str,
    texts: DistinctTexts,
    *,
    data_path: Path,
    output_dir: Path,
    args,
    trained_on: bool,
    batch_size: int,
    chunk_rows: int,
) -> TeacherTargets:
    """`teacher`'s (the recipe's `name` for it) outputs for `texts`, cached (or read back) beside the build
    (`teacher_cache_root`) and pinned in the run at `output_dir`. `args`: the run's TrainingArguments (device,
    which process embeds); `trained_on`: the run has checkpoints, whose targets must not change."""
    teacher.to(args.device)
    identity = teacher_identity(teacher, name, texts)
    directory = shared_cache_dir(teacher_cache_root(data_path, output_dir), identity)
    pin_teacher(output_dir / RUN_RECORD_DIR / "manifest.json", identity, str(directory), trained_on)
    # One process goes first (per machine with save_on_each_node) and embeds; the others then find the outputs
    # done (the cache's lock covers other runs on the same build).
    with args.main_process_first(local=args.save_on_each_node, desc="teacher outputs"):
        return cache_teacher_outputs(
            teacher, identity, texts, directory, batch_size=batch_size, chunk_rows=chunk_rows
        )
