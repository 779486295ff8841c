"""InfoNCE fine-tuning of any encoder into a sentence embedder, and its export as a sentence-transformers
directory: typed recipe settings, the losses by kind (`losses/`), the homogeneous batch sampler, the trainer
and the export."""

from typing import TYPE_CHECKING

from neoembed.faces import attach_face

if TYPE_CHECKING:  # the public names, written once; attach_face loads each on first use
    from .evaluation import retrieval_set as retrieval_set
    from .model import check_trainable as check_trainable
    from .prompts import split_sources as split_sources
    from .result import (
        ContrastiveResult as ContrastiveResult,
        SetScores as SetScores,
        relative_change as relative_change,
    )
    from .selection import evaluated_texts as evaluated_texts, refuse_shared as refuse_shared
    from .settings import (
        BASE_TEACHER as BASE_TEACHER,
        ContrastiveOptim as ContrastiveOptim,
        ContrastiveSettings as ContrastiveSettings,
        ContrastiveTrain as ContrastiveTrain,
        DataSettings as DataSettings,
        EvalSettings as EvalSettings,
        ExportSettings as ExportSettings,
        HeldOutSet as HeldOutSet,
        LossSettings as LossSettings,
        ModelSettings as ModelSettings,
        PromptSettings as PromptSettings,
        SelectionSettings as SelectionSettings,
    )
    from .train import build_trainer as build_trainer, run_contrastive as run_contrastive

__getattr__, __dir__, __all__ = attach_face(__name__, __file__)
