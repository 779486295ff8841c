"""`loss.kind: distill`: InfoNCE plus a term that pulls the student toward a teacher embedder, each with its
weight; the teacher's outputs come from the cache beside the build (`contrastive/teacher_cache.py`).

Why not sentence-transformers' distillation losses as they are: MSELoss / EmbedDistillLoss, DistillKLDivLoss
and MarginMSELoss read the teacher's outputs from the dataset's label column, while here the labels are the
text keys InfoNCE needs; DistillKLDivLoss and MarginMSELoss score each query against its own row's candidates
only, not against the whole (gathered) batch, and none of them masks copies of a text the way InfoNCE does.
So the embedding target calls EmbedDistillLoss's own comparison (`compute_loss_from_embeddings`, with its
projection) on looked-up targets, and the score target is the KL of DistillKLDivLoss (`nn.KLDivLoss`,
batchmean) written over InfoNCE's in-batch candidates. Both score the same (gathered, duplicate-masked) batch
as InfoNCE, so they compose with GradCache, gathering and Matryoshka as InfoNCE does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neoembed.contrastive.losses.base import InBatch, TrainingRun, first_occurrences
from neoembed.contrastive.losses.infonce import InfoNCELoss, infonce_arguments
from neoembed.contrastive.settings import BASE_TEACHER
from neoembed.contrastive.teacher_cache import DistinctTexts, TeacherTargets, teacher_targets
from neoembed.embedder import EmbedderError, load_embedder
from neoembed.errors import RunError
from neoembed.recipes import RecipeError

if TYPE_CHECKING:
    from neoembed.contrastive.settings import ContrastiveSettings, DistillSettings

PROJECTION_FILE = "distill_projection.safetensors"  # in each checkpoint, beside the student's weights


class DistillationLoss(InfoNCELoss):
    """`infonce_weight` x InfoNCE + `weight` x a distillation term: the teacher's in-batch scores
    (`ScoreDistillation`) or its embeddings (`EmbeddingDistillation`) as targets for the student's.

    The teacher embeds every distinct training text once, before the first step (`prepare`), into the cache
    beside the build, which every run on the build with the same teacher shares; a resumed run refuses other
    outputs than those its checkpoints trained on. The training log shows both terms (`infonce`, `distill`)
    beside the loss.

    Settings (the recipe's `loss` section): InfoNCE's (`InfoNCELoss`; `infonce_weight` 0: distillation alone)
    and `loss.distill`:
        - `teacher` (minilm): any sentence-transformers model; `base`: the model being fine-tuned, as it was
          before training.
        - `target` (scores): `scores`, KL between the teacher's and the student's softmax over each query's
          in-batch candidates; `embedding`, the student's embedding against the teacher's (through a learned
          projection, not exported, where the dimensions differ).
        - `weight` (1.0); `metric` (cosine; target embedding: cosine or mse); `temperature` (target scores;
          unset: `loss.temperature`); `max_length`, `batch_size`, `chunk_rows`: the teacher's encoding.

    When to use it: to keep a mature base model's geometry while fine-tuning on a narrow source (`teacher:
    base`, target scores, a regulariser against forgetting), or to teach a weak student a strong embedder's
    ranking (a teacher such as `minilm`). The teacher costs one pass over the distinct texts, once per build.

    Requirements:
        1. InfoNCE's: (query, positive[, negatives]) texts with their text keys as labels.
        2. A teacher embedder that loads here; target embedding with a projection trains in one process, and
           does not combine with Matryoshka dimensions.

    Inputs:
        +--------------------------------------------+---------------------------------------------+
        | Texts                                      | Labels                                      |
        +============================================+=============================================+
        | (query, positive[, negatives]), as InfoNCE | the text keys of each column, as InfoNCE    |
        +--------------------------------------------+---------------------------------------------+

    Relations:
        - `InfoNCELoss` is this loss without the teacher.
        - sentence-transformers' `DistillKLDivLoss` and `EmbedDistillLoss` compare the same quantities, read
          from a label column and over each row's own candidates (see the module's docstring).

    Example:
        ::

            distill = ScoreDistillation(TeacherTargets(keys, vectors), temperature=0.05, weight=1.0)
            loss = DistillationLoss(model, distill, teacher="minilm", temperature=0.05)
            # or in a recipe: loss: {kind: distill, distill: {teacher: minilm, target: scores}}
    """

    logs_terms = True

    def __init__(
        self, model, distill: ScoreDistillation | EmbeddingDistillation | None, teacher: str, **infonce: Any
    ) -> None:
        """`distill`: the term (`ScoreDistillation` or `EmbeddingDistillation`; None until `prepare` makes it
        from the recipe); `teacher`: the recipe's name for the teacher; `infonce`: `InfoNCELoss`'s arguments."""
        super().__init__(model, **infonce)
        self.distill = distill
        self.teacher = teacher
        self.pending: PendingTeacher | None = None

    @classmethod
    def from_recipe(cls, settings: ContrastiveSettings, model, world_size: int) -> DistillationLoss:
        loss = cls(model, None, distill_settings(settings).teacher, **infonce_arguments(settings.loss))
        loss.pending = PendingTeacher(load_teacher(settings, model, world_size), settings)
        return loss

    def prepare(self, run: TrainingRun) -> None:
        """Embed the training texts with the teacher (or read them back from the cache), and let it go."""
        assert self.pending is not None  # from_recipe loaded the teacher
        # Let go of the teacher here: once its outputs are cached, its memory is freed for training.
        teacher, settings = self.pending.teacher, self.pending.settings
        self.pending = None
        distill = distill_settings(settings)
        targets = teacher_targets(
            teacher,
            teacher_name(settings),
            DistinctTexts(run.sources, run.keys),
            data_path=Path(settings.data.path),
            output_dir=Path(settings.train.output_dir),
            args=run.args,
            trained_on=run.resuming,
            batch_size=distill.batch_size,
            chunk_rows=distill.chunk_rows,
        )
        if distill.target == "scores":
            temperature = distill.temperature or settings.loss.temperature
            self.distill = ScoreDistillation(targets, temperature, distill.weight)
        else:
            self.distill = EmbeddingDistillation(self.model, targets, distill.metric, distill.weight)

    def terms(self, batch: InBatch, columns: list[Tensor], keys: list[Tensor]) -> dict[str, Tensor]:
        assert self.distill is not None  # prepare made it
        distill = self.distill.weight * self.distill(batch, columns, keys)
        return {**super().terms(batch, columns, keys), "distill": distill}

    @property
    def config(self) -> dict[str, Any]:
        assert self.distill is not None  # prepare made it
        return {**super().config, "distill": {"teacher": self.teacher, **self.distill.get_config_dict()}}

    def save_checkpoint(self, checkpoint: Path) -> None:
        if isinstance(self.distill, EmbeddingDistillation):
            self.distill.save_projection(checkpoint)

    def load_checkpoint(self, checkpoint: Path) -> None:
        if isinstance(self.distill, EmbeddingDistillation):
            self.distill.load_projection(checkpoint)


@dataclass
class PendingTeacher:
    """The teacher a recipe names, loaded before the run records its recipe, until `prepare` caches its
    outputs (held outside the loss's modules: it never trains)."""

    teacher: Any  # a SentenceTransformer, on the CPU
    settings: ContrastiveSettings


class ScoreDistillation(nn.Module):
    """KL(teacher || student) between the softmaxes over each query's in-batch candidates (the documents of
    every column and rank, copies masked as InfoNCE masks them), cosine / temperature on both sides.

    Not scaled by temperature^2 as DistillKLDivLoss is (Hinton's correction for temperatures >= 1): at
    InfoNCE's temperatures (~0.05) that would shrink the term ~400x; FlagEmbedding does not scale it either.

    Requirements:
        1. A teacher embedder; its embedding of every distinct training text, computed once and cached
           (`TeacherTargets`, looked up by text key).
        2. `DistillationLoss` around it: it scores the batch `ContrastiveLoss.in_batch` built.

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
            loss = DistillationLoss(model, distill, teacher="minilm", temperature=0.05)
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
        2. `DistillationLoss` around it, which hands it each column's embeddings and keys.

    Inputs:
        As `ScoreDistillation`: the texts and the text keys of each column, as `DistillationLoss` takes them.

    Relations:
        - sentence-transformers' `EmbedDistillLoss` is the comparison; this reads the teacher's embeddings
          from the cache by text key instead of a label column, and counts each distinct text once.
        - `ScoreDistillation` matches in-batch score distributions instead.

    Example:
        ::

            distill = EmbeddingDistillation(model, TeacherTargets(keys, vectors), metric="cosine", weight=1.0)
            loss = DistillationLoss(model, distill, teacher="minilm")
            # or in a recipe: loss.distill: {teacher: minilm, target: embedding, metric: cosine}
    """

    def __init__(
        self, model, targets: TeacherTargets, metric: Literal["cosine", "mse"], weight: float
    ) -> None:
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


def distill_settings(settings: ContrastiveSettings) -> DistillSettings:
    """The recipe's `loss.distill`."""
    assert settings.loss.distill is not None  # the settings refuse kind distill without it
    return settings.loss.distill


def teacher_name(settings: ContrastiveSettings) -> str:
    """The model the recipe distils from: `loss.distill.teacher`, where `base` names `model.base`."""
    teacher = distill_settings(settings).teacher
    return settings.model.base if teacher == BASE_TEACHER else teacher


def load_teacher(settings: ContrastiveSettings, student, world_size: int):
    """The recipe's teacher (on the CPU until it embeds), refused where the recipe cannot distil from it."""
    distill = distill_settings(settings)
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
