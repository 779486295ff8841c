"""`neoembed contrastive`: InfoNCE fine-tuning on sentence-transformers' trainer, then the export.

The trainer (the HF Trainer underneath) brings torchrun DDP, DeepSpeed, AdamW with warmup and schedule, bf16,
gradient clipping, rotating checkpoints with optimiser/scheduler/RNG state and exact resume, and periodic
evaluation; sentence-transformers adds per-dataset prompts, LoRA adapters (peft) and the Matryoshka wrapper.
neoembed adds the records as training columns, the duplicate-aware InfoNCE loss, homogeneous global batches,
a JSONL metrics file, and the export.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from datasets import DatasetDict
from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from transformers import TrainerCallback, set_seed

from neoembed.contrastive import prompts
from neoembed.contrastive.data import load_training_sources, row_keys
from neoembed.contrastive.evaluation import build_evaluator, evaluated_source, headline
from neoembed.contrastive.export import declared_max_seq_length, export_model
from neoembed.contrastive.lora import add_lora
from neoembed.contrastive.loss import InfoNCELoss, with_matryoshka
from neoembed.contrastive.model import build_model
from neoembed.contrastive.sampler import HomogeneousBatchSampler
from neoembed.contrastive.settings import ContrastiveSettings
from neoembed.embedder import MINILM_ALIASES
from neoembed.recipes import RecipeError, dump_recipe
from neoembed.training import GuardedLogging, check_resume_compatible, last_complete_checkpoint


class TimeBudget(TrainerCallback):
    """Stop after `minutes` of training (evaluation time excluded); the trainer then saves and exports."""

    def __init__(self, minutes: float) -> None:
        self.seconds, self.spent, self.started = minutes * 60, 0.0, None

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.spent += time.perf_counter() - self.started
        if self.spent >= self.seconds:
            control.should_training_stop = True
            control.should_save = True


class ContrastiveTrainer(GuardedLogging, SentenceTransformerTrainer):
    """The sentence-transformers trainer with homogeneous batches and a metrics JSONL file."""

    def __init__(self, *args, settings: ContrastiveSettings, text_keys: dict, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.settings = settings
        self.text_keys = text_keys  # source -> (rows, columns) keys of its texts, for the sampler
        self.metrics_path = Path(self.args.output_dir) / "metrics.jsonl"

    def get_multi_dataset_batch_sampler(self, dataset, batch_samplers, generator=None, seed=0):
        keys = [self.text_keys[name] for name in self.train_dataset]
        return HomogeneousBatchSampler(
            dataset,
            batch_samplers,
            generator,
            seed,
            alpha=self.settings.data.alpha,
            world_size=self.args.world_size,
            grad_accum=self.args.gradient_accumulation_steps,
            keys=lambda source, row: keys[source][row].tolist(),
            names=list(self.train_dataset.keys()),
        )


def training_arguments(
    settings: ContrastiveSettings, evaluate: bool, prompts: dict | None = None
) -> SentenceTransformerTrainingArguments:
    train, optim = settings.train, settings.optim
    bf16 = train.precision == "bf16" or (
        train.precision == "auto" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    )
    return SentenceTransformerTrainingArguments(
        output_dir=train.output_dir,
        max_steps=train.max_steps,
        per_device_train_batch_size=train.batch_size,
        gradient_accumulation_steps=train.grad_accum,
        learning_rate=optim.lr,
        adam_beta1=optim.betas[0],
        adam_beta2=optim.betas[1],
        adam_epsilon=optim.eps,
        weight_decay=optim.weight_decay,
        warmup_steps=optim.warmup_steps,
        lr_scheduler_type=optim.schedule,
        max_grad_norm=optim.max_grad_norm,
        seed=train.seed,
        bf16=bf16,
        logging_steps=train.log_steps,
        logging_nan_inf_filter=False,  # a NaN must reach `log` and stop the run
        eval_strategy="steps" if evaluate else "no",
        eval_steps=train.eval_steps,
        save_strategy="steps",
        save_steps=train.save_steps,
        save_total_limit=train.keep_checkpoints,
        deepspeed=train.deepspeed,
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=False,
        prompts=prompts or None,
    )


def build_trainer(settings: ContrastiveSettings) -> ContrastiveTrainer:
    """Load the records and the base model and set up the trainer, its loss and held-out evaluator."""
    train = settings.train
    if train.threads:
        torch.set_num_threads(train.threads)
    sources = load_training_sources(
        settings.data.path, settings.data.sources, settings.data.max_negatives, settings.data.max_rows
    )
    prompts.check_sources(settings.data.prompts, sources)
    set_seed(train.seed)
    model = build_model(
        settings.model.base,
        settings.model.pooling,
        settings.model.max_length,
        settings.model.trust_remote_code,
    )
    declared_max_seq_length(model, settings.export.max_seq_length)  # a bad value fails before training
    if settings.model.lora:
        add_lora(model, settings.model.lora)
    loss = InfoNCELoss(
        model,
        temperature=settings.loss.temperature,
        symmetric=settings.loss.symmetric,
        gather=settings.loss.gather,
        mini_batch_size=settings.loss.mini_batch_size,
    )
    dims = matryoshka_dims(settings, model.get_embedding_dimension())
    if dims:
        loss = with_matryoshka(model, loss, dims, settings.loss.matryoshka_weights)
    evaluator = build_evaluator(
        settings.eval,
        prompts.resolve(settings.data.prompts, evaluated_source(settings.eval)),
        [d for d in dims if d != model.get_embedding_dimension()],
    )
    columns = {name: d.column_names for name, d in sources.items()}
    args = training_arguments(
        settings, evaluator is not None, prompts.training_prompts(settings.data.prompts, columns)
    )
    # Recorded only once data and model loaded: a run that failed to start does not pin its recipe.
    output_dir = Path(train.output_dir)
    check_resume_compatible(settings, output_dir)
    dump_recipe(settings, output_dir / "recipe.yaml")
    return ContrastiveTrainer(
        model=model,
        args=args,
        # always a dict: the multi-dataset path is where our sampler plugs in
        train_dataset=DatasetDict(sources),
        loss=loss,
        evaluator=evaluator,
        settings=settings,
        text_keys={name: row_keys(d) for name, d in sources.items()},  # before the trainer's transforms
        callbacks=[TimeBudget(train.max_minutes)] if train.max_minutes else None,
    )


def matryoshka_dims(settings: ContrastiveSettings, dimension: int) -> list[int]:
    """The recipe's Matryoshka dimensions, each at most the model's embedding `dimension`."""
    dims = settings.loss.matryoshka_dims or []
    if any(d > dimension for d in dims):
        raise RecipeError(
            f"loss.matryoshka_dims {dims}: {max(dims)} exceeds the model's {dimension}-dimensional embeddings"
        )
    return dims


def run_contrastive(settings: ContrastiveSettings) -> dict:
    """Train per `settings` (resuming from the newest complete checkpoint), export, and return a summary."""
    trainer = build_trainer(settings)
    model, evaluator, sources = trainer.model, trainer.evaluator, trainer.train_dataset
    output_dir = Path(settings.train.output_dir)
    resume = last_complete_checkpoint(output_dir)
    before = headline(evaluator(model)) if evaluator is not None and resume is None else None
    if before and trainer.is_world_process_zero():
        with trainer.metrics_path.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"step": 0, **{f"eval_{k}": v for k, v in before.items()}}) + "\n")
    trainer.train(resume_from_checkpoint=resume)
    after = headline(evaluator(model)) if evaluator is not None else {}
    summary = {"steps": trainer.state.global_step, "eval_before": before, "eval_after": after}
    if trainer.is_world_process_zero():
        export_path = Path(settings.export.path or output_dir / "neobert-embed")
        evals = {"before fine-tuning": before} if before else {}
        evals["after fine-tuning"] = after
        named = prompts.named_prompts(settings.data.prompts, sources)
        card = _card(settings, model, sources, summary, evals)  # records the training length
        model.max_seq_length = card["max_seq_length"] = declared_max_seq_length(
            model, settings.export.max_seq_length
        )
        export_model(model, export_path, card, named)
        summary["export"] = str(export_path)
        (output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _card(settings, model, sources, summary, evals) -> dict:
    pooling = next((str(m.pooling_mode) for m in model if hasattr(m, "pooling_mode")), "?")
    return {
        "name": Path(settings.export.path or "neobert-embed").name,
        "base_model": MINILM_ALIASES[-1] if settings.model.base in MINILM_ALIASES else settings.model.base,
        "normalized": any(type(m).__name__ == "Normalize" for m in model),
        "temperature": settings.loss.temperature,
        "steps": summary["steps"],
        "dimension": model.get_embedding_dimension(),
        "matryoshka_dims": settings.loss.matryoshka_dims,
        "pooling": pooling,
        "max_length": model.max_seq_length,
        "data_path": settings.data.path,
        "sources": {name: len(d) for name, d in sources.items()},
        "eval_name": f"held-out {settings.eval.kind} retrieval",
        "metric_names": ["ndcg@10", "recall@1", "recall@10", "recall@100"]
        + [
            f"ndcg@10_dim{d}"
            for d in settings.loss.matryoshka_dims or []
            if d != model.get_embedding_dimension()
        ],
        "eval": {k: v for k, v in evals.items() if v},
        "recipe": settings.model_dump(mode="json"),
    }
