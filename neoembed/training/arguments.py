"""From the training vocabulary to the Trainer's arguments: the one mapping every trainer uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from transformers import TrainingArguments
from transformers.integrations import is_tensorboard_available

from neoembed.compilation import compile_encoder, compile_wanted
from neoembed.precision import resolve_precision
from neoembed.training.settings import OptimSettings, RunSettings, TrainSettings


class PrecisionArguments(TypedDict):
    """TrainingArguments' device and mixed-precision flags, passed on as keyword arguments."""

    bf16: bool
    fp16: bool
    use_cpu: bool


def precision_arguments(precision: str) -> PrecisionArguments:
    """The TrainingArguments device and mixed-precision flags for a `train.precision` ("auto", "fp32",
    "bf16"), as the precision resolver answers it."""
    resolved = resolve_precision(precision)
    return PrecisionArguments(
        bf16=resolved.train_bf16, fp16=resolved.train_fp16, use_cpu=resolved.device == "cpu"
    )


def reporters() -> list[str]:
    """The Trainer's `report_to`: TensorBoard when installed (`neoembed[tensorboard]`; events under
    <output_dir>/runs/), else none. Every run also logs to metrics.jsonl and draws curves.png (`MetricsLog`)."""
    return ["tensorboard"] if is_tensorboard_available() else []


def trainer_arguments(
    run: RunSettings,
    optim: OptimSettings,
    /,
    *,
    output_dir: str | Path | None = None,
    args_class: type[TrainingArguments] = TrainingArguments,
    **specific,
) -> TrainingArguments:
    """`args_class` with every field the `run` and `optim` sections set, plus the job's `specific` ones (which
    may override a shared one). A `TrainSettings` run also sets its steps, checkpoints and output directory;
    another run names its `output_dir`. Curves go to TensorBoard where it is installed (`reporters`). The NaN
    filter is off, so a NaN loss reaches `MetricsLog` and stops
    the run before anything is saved after it."""
    shared: dict[str, Any] = dict(
        seed=run.seed,
        **precision_arguments(run.precision),
        gradient_accumulation_steps=run.grad_accum,
        logging_steps=run.log_steps,
        logging_nan_inf_filter=False,
        dataloader_num_workers=run.num_workers,
        deepspeed=run.deepspeed,
        ddp_find_unused_parameters=False,  # every parameter gets a gradient: skip DDP's graph walk
        report_to=reporters(),
        learning_rate=optim.lr,
        weight_decay=optim.weight_decay,
        adam_beta1=optim.betas[0],
        adam_beta2=optim.betas[1],
        adam_epsilon=optim.eps,
        max_grad_norm=optim.max_grad_norm,
        warmup_steps=optim.warmup_steps,
    )
    if isinstance(run, TrainSettings):
        shared |= dict(
            output_dir=run.output_dir,
            max_steps=run.max_steps,
            save_strategy="steps",
            save_steps=run.save_steps,
            save_total_limit=run.keep_checkpoints,
            eval_steps=run.eval_steps,
        )
    if output_dir is not None:
        shared["output_dir"] = str(output_dir)
    return args_class(**(shared | specific))


def compile_for_training(model, run: RunSettings) -> bool:
    """Compile `model`'s encoder where `train.compile` wants it on the device the run trains on; whether it did."""
    compiled = compile_wanted(run.compile, resolve_precision(run.precision).device)
    if compiled:
        compile_encoder(model)
    return compiled
