"""Distillation from a teacher embedder: the teacher's output for every distinct training text, computed once
per build and cached beside it, and the two distillation terms InfoNCELoss adds to its own.

The cache: `<data.path>/teacher-outputs/<digest>/vectors.f32` holds the teacher's embedding of each distinct
text (by `text_key`), written chunk by chunk by `neoembed.vector_file.embed_to_file`, so a killed run resumes
the encoding where it stopped; `manifest.json` says which teacher (its weights' fingerprint) embedded which
texts (a digest of their keys in row order), and the directory's name is a digest of that, so every run on the
build with the same teacher and texts (another seed, precision or learning rate) reuses it. Each run records
the outputs it trains on in `<train.output_dir>/teacher/manifest.json` and refuses other ones on resume. The
training batches already carry every text's key (the loss's labels), so the loss looks the teacher's outputs
up by key: nothing is added to the dataset.

Why not sentence-transformers' distillation losses as they are: MSELoss / EmbedDistillLoss, DistillKLDivLoss
and MarginMSELoss read the teacher's outputs from the dataset's label column, while here the labels are the
text keys InfoNCE needs; DistillKLDivLoss and MarginMSELoss score each query against its own row's candidates
only, not against the whole (gathered) batch, and none of them masks copies of a text the way InfoNCE does.
So the embedding target calls EmbedDistillLoss's own comparison (`compute_loss_from_embeddings`, with its
projection) on looked-up targets, and the score target is the KL of DistillKLDivLoss (`nn.KLDivLoss`,
batchmean) written over InfoNCE's in-batch candidates.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neoembed.contrastive.data import text_columns
from neoembed.contrastive.loss import InBatch, first_occurrences
from neoembed.contrastive.settings import ContrastiveSettings
from neoembed.embedder import EmbedderError, load_embedder, model_fingerprint
from neoembed.errors import RunError
from neoembed.recipes import RecipeError
from neoembed.run_files import one_writer, write_json
from neoembed.vector_file import embed_to_file

SHARED_CACHE_DIR = "teacher-outputs"  # under data.path: <digest>/vectors.f32 and manifest.json
RUN_RECORD_DIR = "teacher"  # under train.output_dir: manifest.json, the outputs the run trains on
PROJECTION_FILE = "distill_projection.safetensors"  # in each checkpoint, beside the student's weights


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


class ScoreDistillation(nn.Module):
    """KL(teacher || student) between the softmaxes over each query's in-batch candidates (the documents of
    every column and rank, copies masked as InfoNCE masks them), cosine / temperature on both sides.

    Not scaled by temperature^2 as DistillKLDivLoss is (Hinton's correction for temperatures >= 1): at
    InfoNCE's temperatures (~0.05) that would shrink the term ~400x; FlagEmbedding does not scale it either.

    Requirements:
        1. A teacher embedder; its embedding of every distinct training text, computed once and cached
           (`TeacherTargets`, looked up by text key).
        2. `InfoNCELoss` around it: it scores the batch `InfoNCELoss.in_batch` built.

    Inputs:
        +--------------------------------------------+---------------------------------------------+
        | Texts                                      | Labels                                      |
        +============================================+=============================================+
        | (query, positive[, negatives]), as InfoNCE | the text keys of each column, as InfoNCE    |
        +--------------------------------------------+---------------------------------------------+

    Relations:
        - sentence-transformers' `DistillKLDivLoss` compares the same distributions over each row's own
          candidates only, read from a label column; this one takes every in-batch candidate.
        - `EmbeddingDistillation` matches embeddings instead of scores.

    Example:
        ::

            distill = ScoreDistillation(TeacherTargets(keys, vectors), temperature=0.05, weight=1.0)
            loss = InfoNCELoss(model, temperature=0.05, distill=distill)
            # or in a recipe: loss.distill: {teacher: minilm, target: scores}
    """

    def __init__(self, targets: TeacherTargets, temperature: float, weight: float) -> None:
        super().__init__()
        self.targets, self.temperature, self.weight = targets, temperature, weight

    def forward(self, batch: InBatch, columns: list[Tensor], keys: list[Tensor]) -> Tensor:
        excluded = batch.duplicates()
        scale = 1.0 / self.temperature
        student = batch.scores(scale).masked_fill(excluded, -torch.inf)
        queries = F.normalize(self.targets(batch.query_keys[batch.rows]), dim=-1)
        docs = F.normalize(self.targets(batch.doc_keys), dim=-1)
        teacher = (scale * queries @ docs.T).to(student.dtype).masked_fill(excluded, -torch.inf)
        # Excluded candidates have probability 0 under both; kl_div's xlogy makes their terms 0 once the
        # student's -inf log-probabilities there are replaced by any finite value.
        log_student = F.log_softmax(student, dim=-1).masked_fill(excluded, 0.0)
        return F.kl_div(log_student, F.softmax(teacher, dim=-1), reduction="batchmean")

    def get_config_dict(self) -> dict[str, Any]:
        return {"target": "scores", "temperature": self.temperature, "weight": self.weight}


class EmbeddingDistillation(nn.Module):
    """The student's embedding of each distinct text of the (local) batch against the teacher's, by
    sentence-transformers' EmbedDistillLoss comparison (cosine or MSE), through its learned projection where
    the dimensions differ. The projection trains with the student and is not part of the exported model.

    Requirements:
        1. A teacher embedder; its embedding of every distinct training text, cached (`TeacherTargets`).
        2. `InfoNCELoss` around it, which hands it each column's embeddings and keys.

    Inputs:
        As `ScoreDistillation`: the texts and the text keys of each column, as `InfoNCELoss` takes them.

    Relations:
        - sentence-transformers' `EmbedDistillLoss` is the comparison; this reads the teacher's embeddings
          from the cache by text key instead of a label column, and counts each distinct text once.
        - `ScoreDistillation` matches in-batch score distributions instead.

    Example:
        ::

            distill = EmbeddingDistillation(model, TeacherTargets(keys, vectors), metric="cosine", weight=1.0)
            loss = InfoNCELoss(model, distill=distill)
            # or in a recipe: loss.distill: {teacher: minilm, target: embedding, metric: cosine}
    """

    def __init__(self, model, targets: TeacherTargets, metric: str, weight: float) -> None:
        from sentence_transformers.sentence_transformer.losses import EmbedDistillLoss

        super().__init__()
        projection = targets.dimension if targets.dimension != model.get_embedding_dimension() else None
        self.compare = EmbedDistillLoss(model, distance_metric=metric, projection_dim=projection)
        self.targets, self.weight = targets, weight

    @property
    def projection(self) -> nn.Linear | None:
        return self.compare.projection

    def save_projection(self, checkpoint: Path) -> None:
        """Keep the projection in a checkpoint: the Trainer saves the model's weights only."""
        if self.projection is not None:
            self.compare.save_projection(Path(checkpoint) / PROJECTION_FILE)

    def load_projection(self, checkpoint: Path) -> None:
        if self.projection is not None:
            path = Path(checkpoint) / PROJECTION_FILE
            if not path.exists():
                raise RunError(f"{checkpoint} has no {PROJECTION_FILE}: it is not a checkpoint of this run")
            self.compare.load_projection(path)

    def forward(self, batch: InBatch, columns: list[Tensor], keys: list[Tensor]) -> Tensor:
        embeddings, text_keys = torch.cat(columns), torch.cat(keys)
        first = first_occurrences(text_keys)  # each text once, as InfoNCE counts it
        teacher = self.targets(text_keys[first])
        return self.compare.compute_loss_from_embeddings([embeddings[first]], [teacher])

    def get_config_dict(self) -> dict[str, Any]:
        return {"target": "embedding", **self.compare.get_config_dict(), "weight": self.weight}


BASE_TEACHER = "base"  # loss.distill.teacher: the model being fine-tuned, before training


def teacher_name(settings: ContrastiveSettings) -> str:
    """The model the recipe distils from: `loss.distill.teacher`, where `base` names `model.base`."""
    teacher = settings.loss.distill.teacher
    return settings.model.base if teacher == BASE_TEACHER else teacher


def load_teacher(settings: ContrastiveSettings, student, world_size: int):
    """The recipe's teacher (on the CPU until it embeds), refused where the recipe cannot distil from it."""
    distill = settings.loss.distill
    try:
        teacher = load_embedder(teacher_name(settings), device="cpu", max_seq_length=distill.max_length)
    except EmbedderError as err:
        raise EmbedderError(f"loss.distill.teacher: {err.message}", param="loss.distill.teacher") from err
    dims = student.get_embedding_dimension(), teacher.get_embedding_dimension()
    if distill.target == "embedding" and dims[0] != dims[1] and world_size > 1:
        # The projection lives in the loss, outside the model DDP synchronises: each process would train
        # its own copy.
        raise RecipeError(
            f"loss.distill.target embedding needs a {dims[0]}->{dims[1]} projection, which trains in one "
            "process only: train in one process, or use loss.distill.target scores",
            param="loss.distill.target",
        )
    return teacher


def distillation_term(
    settings: ContrastiveSettings, student, teacher, texts: DistinctTexts, args, trained_on: bool
) -> nn.Module:
    """The recipe's distillation term for InfoNCELoss, with the teacher's outputs cached (or read back) beside
    the build (`teacher_cache_root`). `args`: the run's TrainingArguments (device, which process embeds)."""
    distill = settings.loss.distill
    teacher.to(args.device)
    identity = teacher_identity(teacher, teacher_name(settings), texts)
    output_dir = Path(settings.train.output_dir)
    directory = shared_cache_dir(teacher_cache_root(Path(settings.data.path), output_dir), identity)
    pin_teacher(output_dir / RUN_RECORD_DIR / "manifest.json", identity, str(directory), trained_on)
    # One process goes first (per machine with save_on_each_node) and embeds; the others then find the outputs
    # done (the cache's lock covers other runs on the same build).
    with args.main_process_first(local=args.save_on_each_node, desc="teacher outputs"):
        targets = cache_teacher_outputs(
            teacher, identity, texts, directory, batch_size=distill.batch_size, chunk_rows=distill.chunk_rows
        )
    if distill.target == "scores":
        return ScoreDistillation(targets, distill.temperature or settings.loss.temperature, distill.weight)
    return EmbeddingDistillation(student, targets, distill.metric, distill.weight)
