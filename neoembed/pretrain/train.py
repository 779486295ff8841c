"""`neoembed pretrain`: MLM pretraining of NeoBERT on the transformers Trainer.

The Trainer brings what the recipe needs from existing engines: torchrun DDP, DeepSpeed ZeRO through a config
file, gradient accumulation, bf16 autocast, gradient checkpointing, rotating checkpoints with optimiser,
scheduler and RNG state, and resume. neoembed adds the data (`MLMBatches`, deterministic per batch index, read
in order), the paper's schedule or warmup-stable-decay, token throughput, MFU and packing efficiency in the
logs, a JSONL metrics file, and a stop with a clear message when the loss stops being finite.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import torch
from torch import nn
from transformers import Trainer

from neoembed.precision import resolve_precision
from neoembed.pretrain.batches import MLMBatches, batch_counts, tokenize_documents, unwrap_single
from neoembed.pretrain.corpus import load_corpus
from neoembed.pretrain.neobert import (
    NeoBERTConfig,
    NeoBERTForMaskedLM,
    device_peak_flops,
    load_tokenizer,
    training_flops,
)
from neoembed.pretrain.schedule import lr_multiplier, wsd_multiplier
from neoembed.pretrain.settings import PretrainSettings
from neoembed.pretrain.teacher_embeddings import teacher_token_embeddings
from neoembed.recipes import RecipeError
from neoembed.run_files import METRICS_FILE
from neoembed.training import (
    Launch,
    MetricsLog,
    Prepared,
    check_resume_compatible,
    compile_for_training,
    last_complete_checkpoint,
    more_accumulation,
    open_run,
    plan_launch,
    run_job,
    save_final,
    trainer_arguments,
    world_size,
)


def throughput_warmup_steps(compiled: bool) -> int:
    """Optimizer steps left out of the throughput window: the first allocates memory and tunes kernels; with
    compiled layers the first shapes of each layout also compile."""
    return 3 if compiled else 1


class PretrainTrainer(Trainer):
    """Trainer plus the recipe's schedule, throughput / MFU / packing efficiency in every log."""

    def __init__(self, *args, settings: PretrainSettings, compiled: bool, peak: float | None, **kwargs):
        super().__init__(*args, **kwargs)
        self.settings = settings
        self.peak = peak
        self.warmup_steps = throughput_warmup_steps(compiled)
        self._steps_run = 0  # optimizer steps this process started (a resumed run starts again at 0)
        self._window_start: float | None = None  # opens when the warm-up steps are done
        self._tokens = self._flops = 0.0  # inside the window
        self._real = self._slots = 0  # since the last log, warm-up included: packing efficiency

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.lr_scheduler is None:
            optim = self.settings.optim
            if optim.schedule == "wsd":
                factor = partial(wsd_multiplier, decay_steps_fraction=optim.wsd_decay_fraction)
            else:
                factor = partial(lr_multiplier, decay_fraction=optim.decay_fraction)
            factor = partial(
                factor,
                warmup_steps=self.args.get_warmup_steps(num_training_steps),
                total_steps=num_training_steps,
                min_ratio=optim.min_lr_ratio,
            )
            optimizer = optimizer or self.optimizer
            assert optimizer is not None  # the Trainer creates its optimizer before the scheduler
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return self.lr_scheduler

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """Also count what the step's micro-batches hold (one device sync per optimizer step)."""
        batches, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        if not batches:
            return batches, num_items
        row_length = self.settings.data.max_length
        counts = torch.stack([batch_counts(b, row_length) for b in batches]).sum(0).tolist()
        real, slots, squares, decoded = counts
        self._real += real
        self._slots += slots
        if self._steps_run == self.warmup_steps:
            self._window_start = time.perf_counter()
        if self._steps_run >= self.warmup_steps:
            self._tokens += real
            self._flops += training_flops(self.model.config, real, squares, decoded)
        self._steps_run += 1
        return batches, num_items

    def log(self, logs: dict, *args, **kwargs) -> None:
        if "loss" in logs:
            if self._slots:
                logs["packing_efficiency"] = round(self._real / self._slots, 4)
            self._real = self._slots = 0
        if "loss" in logs and self._window_start is not None and self._tokens:
            now, world = time.perf_counter(), self.args.world_size
            seconds = max(now - self._window_start, 1e-9)
            logs["tokens_per_s"] = round(self._tokens * world / seconds, 1)
            if self.peak:
                logs["mfu"] = round(self._flops / (seconds * self.peak), 4)
            self._window_start, self._tokens, self._flops = now, 0.0, 0.0
        super().log(logs, *args, **kwargs)


def build_model(settings: PretrainSettings, tokenizer) -> NeoBERTForMaskedLM:
    """From `model.init_from` (e.g. stage 1 for stage 2) or from scratch with `model.config` fields, its word
    embeddings from `model.embeddings_from` when set."""
    if settings.model.init_from and settings.model.embeddings_from:
        raise RecipeError("model.embeddings_from initialises a model from scratch; model.init_from loads one")
    if settings.model.init_from:
        model = NeoBERTForMaskedLM.from_pretrained(settings.model.init_from)
        if settings.data.max_length > model.config.max_length:
            model.config.max_length = settings.data.max_length
    else:
        try:
            config = NeoBERTConfig(pad_token_id=tokenizer.pad_token_id, **settings.model.config)
        except (TypeError, ValueError) as err:
            raise RecipeError(f"model.config: {err}") from err
        model = NeoBERTForMaskedLM(config)
    if len(tokenizer) > model.config.vocab_size:
        raise RecipeError(
            f"model.tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {model.config.vocab_size}"
        )
    if settings.data.max_length > model.config.max_length:
        raise RecipeError(
            f"data.max_length {settings.data.max_length} exceeds model max_length {model.config.max_length}"
        )
    if settings.model.embeddings_from:
        vectors = teacher_token_embeddings(
            settings.model.embeddings_from, tokenizer, model.config.hidden_size
        )
        with torch.no_grad():
            embeddings = model.get_input_embeddings()
            assert isinstance(embeddings, nn.Embedding)
            embeddings.weight[: len(vectors)] = vectors
    return model


def run_pretraining(settings: PretrainSettings) -> Path:
    """Train per `settings`, resuming from the newest checkpoint in the output directory; return the final
    Hugging Face directory (config.json, model.safetensors, tokenizer). The steps every trainer shares are
    `training.run_job`'s; `PretrainJob` fills in the data, the model and the save."""
    return run_job(PretrainJob(settings), settings.train, Path(settings.train.output_dir))


class PretrainJob:
    """MLM pretraining as a `training.Job`."""

    def __init__(self, settings: PretrainSettings) -> None:
        self.settings = settings
        self.output_dir = Path(settings.train.output_dir)

    def prepare(self) -> Prepared:
        from accelerate import PartialState

        settings, output_dir = self.settings, self.output_dir
        train = settings.train
        state = PartialState()  # under torchrun/deepspeed: one process per device
        data = settings.data
        packed = data.mode == "packed"
        truncate = None if packed else data.max_length
        self.tokenizer = tokenizer = load_tokenizer(settings.model.tokenizer)
        # The main process checks and writes the run directory and fills the datasets cache first; the other
        # ranks then only read (the recipe record, the complete checkpoints, the cached tokenisation).
        with state.main_process_first():
            if state.is_main_process:
                resume_from = open_run(settings, output_dir)
            train_docs, heldout_docs = load_corpus(settings.corpus)
            train_tokens = tokenize_documents(train_docs, tokenizer, truncate_to=truncate)
            heldout_tokens = (
                tokenize_documents(heldout_docs, tokenizer, truncate_to=truncate)
                if len(heldout_docs)
                else None
            )
            if not state.is_main_process:
                check_resume_compatible(settings, output_dir)
                resume_from = last_complete_checkpoint(output_dir)
        launch = plan_launch(
            output_dir,
            Launch(world_size(), data.batch_size, train.grad_accum),
            resuming=resume_from is not None,
            elastic=train.elastic,
            zero=train.deepspeed is not None,
            resize=more_accumulation,
        )
        common = dict(
            max_length=data.max_length,
            packed=packed,
            batch_size=data.batch_size,
            mask_rate=data.mask_rate,
            mask_mode=data.mask_mode,
            tokenizer=tokenizer,
        )
        train_batches = MLMBatches(
            train_tokens,
            num_items=train.max_steps * launch.grad_accum * launch.world_size,
            seed=train.seed,
            length_buckets=[(b.min_tokens, b.probability) for b in data.length_buckets],
            **common,
        )
        eval_batches = None
        if heldout_tokens is not None:
            eval_batches = MLMBatches(
                heldout_tokens,
                num_items=train.eval_batches,
                seed=train.seed + 1,
                **common,
            )

        self.model = model = build_model(settings, tokenizer)
        compiled = compile_for_training(model, train)
        precision = resolve_precision(train.precision)
        args = trainer_arguments(
            train,
            settings.optim,
            per_device_train_batch_size=1,  # each dataset item already is a micro-batch
            per_device_eval_batch_size=1,
            gradient_accumulation_steps=launch.grad_accum,
            train_sampling_strategy="sequential",  # MLMBatches decides the order (seeded, resumable)
            gradient_checkpointing=settings.model.gradient_checkpointing,
            eval_strategy="steps" if eval_batches is not None else "no",
            prediction_loss_only=True,
            remove_unused_columns=False,
        )
        trainer = PretrainTrainer(
            model=model,
            args=args,
            train_dataset=train_batches,
            eval_dataset=eval_batches,
            data_collator=unwrap_single,
            settings=settings,
            compiled=compiled,
            peak=device_peak_flops(train.peak_tflops, half_precision=precision.train_bf16),
            callbacks=[MetricsLog(output_dir / METRICS_FILE)],
        )
        # logits for masked tokens only: the same loss, a fifth of the decoder
        model.config.sparse_prediction = True
        return Prepared(trainer, resume_from)

    def finish(self, prepared: Prepared) -> Path:
        trainer, model, tokenizer = prepared.trainer, self.model, self.tokenizer
        model.config.sparse_prediction = False  # a training setting: users of the saved model get full logits
        final_dir = self.output_dir / "final"
        save_final(trainer, str(final_dir))
        if trainer.is_world_process_zero():
            tokenizer.model_max_length = model.config.max_length
            tokenizer.save_pretrained(final_dir)
        return final_dir
