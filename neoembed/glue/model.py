"""Load an encoder with a sequence-classification head for a GLUE task, and its tokenizer.

NeoBERT directories get NeoBERT's CLS + dense + tanh head (`import neoembed` registers it with
AutoModelForSequenceClassification); other encoders get their own transformers head. A head whose shape
does not fit the task (an MNLI checkpoint reused for RTE) is re-initialised; the backbone is kept.
"""

from __future__ import annotations

from neoembed.embedder import resolve_model_name
from neoembed.glue.tasks import GlueError, GlueTask


def load_glue_tokenizer(model: str, tokenizer: str | None = None):
    """The tokenizer of `model` (or `tokenizer`), checked to encode a sentence pair into the model's vocab."""
    from transformers import AutoConfig, AutoTokenizer

    name = resolve_model_name(tokenizer or model)
    hint = "pass --tokenizer DIR_OR_ID (NeoBERT uses bert-base-uncased)"
    try:
        loaded = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError, KeyError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GlueError(f"{name}: no usable tokenizer ({reason}); {hint}") from None
    if not getattr(loaded, "is_fast", False):
        raise GlueError(f"{name}: the tokenizer is not a fast tokenizer; {hint}")
    try:
        vocab_size = AutoConfig.from_pretrained(resolve_model_name(model)).vocab_size
    except (OSError, ValueError, KeyError, AttributeError) as err:
        raise GlueError(f"{model}: cannot read the model config: {err}") from None
    ids = loaded("a first sentence", "a second one")["input_ids"]
    if len(loaded) > vocab_size or max(ids) >= vocab_size:
        raise GlueError(
            f"{name}: the tokenizer has {len(loaded)} ids but model {model} embeds only {vocab_size}; {hint}"
        )
    return loaded


def load_glue_model(model: str, task: GlueTask):
    """`model` (a directory or hub id) with a fresh head sized for `task`, or its own head if it fits."""
    from transformers import AutoModelForSequenceClassification

    labels = task.label_names or ("score",)
    try:
        return AutoModelForSequenceClassification.from_pretrained(
            resolve_model_name(model),
            num_labels=task.num_labels,
            problem_type="regression" if task.is_regression else "single_label_classification",
            id2label=dict(enumerate(labels)),
            label2id={name: i for i, name in enumerate(labels)},
            ignore_mismatched_sizes=True,
        )
    except (OSError, ValueError, KeyError) as err:
        raise GlueError(f"cannot load {model} as a sequence classifier: {err}") from None
