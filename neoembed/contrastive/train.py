"""`neoembed contrastive`: InfoNCE fine-tuning on sentence-transformers' trainer, then the export.

The trainer (the HF Trainer underneath) brings torchrun DDP, DeepSpeed, AdamW with warmup and schedule, bf16,
gradient clipping, rotating checkpoints with optimiser/scheduler/RNG state and exact resume, and periodic
evaluation; sentence-transformers adds per-dataset prompts, LoRA adapters (peft) and the Matryoshka wrapper.
neoembed adds the records as training columns (texts and their keys), the loss `loss.kind` names (`losses/`:
the duplicate-aware InfoNCE, or InfoNCE with distillation from a teacher), homogeneous global batches, the
JSONL metrics file and NaN stop (`training.MetricsLog`), and the export with its model card.
"""

from __future__ import annotations

import functools
import json
import operator
from pathlib import Path

import torch
from datasets import DatasetDict
from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from torch import nn

from neoembed.contrastive import prompts
from neoembed.contrastive.data import (
    TEXT_KEYS,
    TextKeyCollator,
    load_training_sources,
    text_columns,
    text_keys,
)
from neoembed.contrastive.evaluation import build_evaluator, describe_sets, set_scores
from neoembed.contrastive.export import declared_max_seq_length, export_model
from neoembed.contrastive.lora import add_lora
from neoembed.contrastive.losses import loss_class
from neoembed.contrastive.losses.base import ContrastiveLoss, TrainingRun, with_matryoshka
from neoembed.contrastive.model import build_model
from neoembed.contrastive.model_card import training_facts
from neoembed.contrastive.result import ContrastiveResult
from neoembed.contrastive.sampler import HomogeneousBatchSampler
from neoembed.contrastive.selection import SelectionSplit, Tuned, choose_export, selection_split
from neoembed.contrastive.settings import ContrastiveSettings
from neoembed.contrastive.weight_ensemble import WeightMix
from neoembed.recipes import RecipeError
from neoembed.run_files import METRICS_FILE, append_jsonl
from neoembed.training import (
    Launch,
    MetricsLog,
    Prepared,
    TimeBudget,
    compile_for_training,
    complete_checkpoints,
    configure_process,
    larger_batches,
    last_complete_checkpoint,
    open_run,
    plan_launch,
    recorded_recipe,
    run_job,
    trainer_arguments,
    world_size,
    write_curves,
)


class ContrastiveTrainer(SentenceTransformerTrainer):
    """The sentence-transformers trainer with homogeneous batches and each text's key passed to the loss."""

    data_collator_class = TextKeyCollator

    def __init__(
        self,
        *args,
        settings: ContrastiveSettings,
        text_keys: dict,
        selection: SelectionSplit | None,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.settings = settings
        self.text_keys = text_keys  # source -> (rows, texts) keys of its texts, for the sampler
        self.selection = selection  # export.base_weight auto's selection split
        # loss.base_pull's anchor: the trained weights as they start, i.e. the base model's (the trainer is
        # built from the base, and a resumed run loads its checkpoint only later).
        self.start_weights = (
            {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}
            if settings.loss.base_pull
            else {}
        )
        # The model card's dataset statistics and examples (filled by the library's card callback): the texts
        # the model saw, not the key columns the loss reads.
        card_data = self.model.model_card_data
        card_data.train_datasets = card_data.extract_dataset_metadata(
            DatasetDict({name: d.select_columns(text_columns(d)) for name, d in self.sources.items()}),
            card_data.train_datasets,
            self.loss,
            "train",
        )

    @property
    def sources(self) -> DatasetDict:
        """The training datasets by source name."""
        assert isinstance(self.train_dataset, DatasetDict)  # what `build_trainer` passes
        return self.train_dataset

    @property
    def contrastive_loss(self) -> ContrastiveLoss:
        """The loss `loss.kind` names (maybe inside Matryoshka's wrapper)."""
        assert isinstance(self.loss, nn.Module)  # one loss for every source, not a dict of them
        return next(m for m in self.loss.modules() if isinstance(m, ContrastiveLoss))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The library's, and the loss's terms (where it logs them) beside it."""
        self.contrastive_loss.pop_components()  # only this call's terms
        result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        components = self.contrastive_loss.pop_components()
        if self.start_weights:
            pull = self.settings.loss.base_pull * self.distance_from_start()
            loss = result[0] if return_outputs else result
            # A loss that logs no terms of its own is one term, named by its kind.
            own = components or {self.settings.loss.trained_kind: loss.detach()}
            components = {**own, "base_pull": pull.detach()}
            result = (result[0] + pull, *result[1:]) if return_outputs else result + pull
        if components:
            self.track_loss_components(components)
        return result

    def distance_from_start(self) -> torch.Tensor:
        """The squared L2 distance of the trained weights from where they started (loss.base_pull)."""
        named = dict(self.model.named_parameters())
        # reduce, not sum: the same additions without sum's leading `0 +` (start_weights is never empty here)
        return functools.reduce(
            operator.add, (((named[n] - start) ** 2).sum() for n, start in self.start_weights.items())
        )

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        super()._save(output_dir, state_dict)
        checkpoint = output_dir or self.args.output_dir
        assert checkpoint is not None  # trainer_arguments always sets output_dir
        self.contrastive_loss.save_checkpoint(Path(checkpoint))

    # sentence-transformers' BaseTrainer renames transformers' `resume_from_checkpoint` to `checkpoint_path`
    # (and drops `model`): no signature matches both, so this one matches the class it extends.
    def _load_from_checkpoint(self, checkpoint_path: str, *args, **kwargs) -> None:  # type: ignore[override]
        super()._load_from_checkpoint(checkpoint_path, *args, **kwargs)
        self.contrastive_loss.load_checkpoint(Path(checkpoint_path))

    # The library types labels as one Tensor; it hands them to the loss unchanged, and ours take one per column.
    def collect_features(  # type: ignore[override]
        self, inputs: dict
    ) -> tuple[list[dict[str, torch.Tensor]], list[torch.Tensor]]:
        """Each column's model inputs, and as the loss's labels each column's text keys."""
        features, _ = super().collect_features(inputs)
        return features, list(inputs[TEXT_KEYS].unbind(1))

    def get_multi_dataset_batch_sampler(self, dataset, batch_samplers, generator=None, seed=0):
        keys = [self.text_keys[name] for name in self.sources]
        return HomogeneousBatchSampler(
            dataset,
            batch_samplers,
            generator,
            seed,
            alpha=self.settings.data.alpha,
            world_size=self.args.world_size,
            grad_accum=self.args.gradient_accumulation_steps,
            keys=lambda source, row: keys[source][row].tolist(),
            names=list(self.sources.keys()),
        )


def training_arguments(
    settings: ContrastiveSettings, evaluate: bool, prompts: dict | None = None
) -> SentenceTransformerTrainingArguments:
    args = trainer_arguments(
        settings.train,
        settings.optim,
        args_class=SentenceTransformerTrainingArguments,
        per_device_train_batch_size=settings.train.batch_size,
        lr_scheduler_type=settings.optim.schedule,
        eval_strategy="steps" if evaluate else "no",
        # A BERT-style base computes a pooler output that mean/CLS pooling of the token states never uses, so
        # its pooler gets no gradient: DDP must look for unused parameters or it fails at the second step.
        ddp_find_unused_parameters=True,
        disable_tqdm=False,
        prompts=prompts or None,
    )
    assert isinstance(args, SentenceTransformerTrainingArguments)  # the args_class asked for
    return args


def build_trainer(settings: ContrastiveSettings) -> ContrastiveTrainer:
    """Load the records and the base model and set up the trainer, its loss and held-out evaluator."""
    recipe, output_dir = settings, Path(settings.train.output_dir)
    settings = on_this_launch(settings, output_dir)
    train = settings.train
    configure_process(train)  # as run_job does: callers that build a trainer alone get the recipe's seed too
    sources = load_training_sources(
        settings.data.path, settings.data.sources, settings.data.max_negatives, settings.data.max_rows
    )
    prompts.check_sources(settings.data.prompts, sources)
    selection = None
    if settings.export.base_weight == "auto":  # its in-domain rows leave training
        sources, selection = selection_split(settings, sources)
    model = build_model(
        settings.model.base,
        settings.model.pooling,
        settings.model.max_length,
        settings.model.trust_remote_code,
    )
    model.model_card_data.local_files_only = True  # the export's card: no Hub look-ups
    declared_max_seq_length(model, settings.export.max_seq_length)  # a bad value fails before training
    if settings.model.lora:
        add_lora(model, settings.model.lora)
    compile_for_training(model, train)
    dims = matryoshka_dims(settings, model.get_embedding_dimension())
    evaluator = build_evaluator(settings.eval, settings.data.prompts, scored_dims(settings, model))
    columns = {name: text_columns(d) for name, d in sources.items()}
    args = training_arguments(
        settings, evaluator is not None, prompts.training_prompts(settings.data.prompts, columns)
    )
    loss = loss_class(settings.loss.trained_kind).from_recipe(settings, model, args.world_size)
    # Recorded only once data and models loaded: a run that failed to start does not pin its recipe.
    resume = open_run(recipe, output_dir)
    keys = {name: text_keys(d) for name, d in sources.items()}  # before the trainer's transforms
    loss.prepare(TrainingRun(sources, keys, args, resuming=resume is not None))
    if dims:
        loss = with_matryoshka(model, loss, dims, settings.loss.matryoshka_weights)
    return ContrastiveTrainer(
        model=model,
        args=args,
        # always a dict: the multi-dataset path is where our sampler plugs in
        train_dataset=DatasetDict(sources),
        loss=loss,
        evaluator=evaluator,
        settings=settings,
        text_keys=keys,
        selection=selection,
        callbacks=[MetricsLog(output_dir / METRICS_FILE)]
        + ([TimeBudget(train.max_minutes)] if train.max_minutes else []),
    )


def on_this_launch(settings: ContrastiveSettings, output_dir: Path) -> ContrastiveSettings:
    """The settings this launch trains with: the recipe's, or, when a run resumes on another number of ranks
    (`train.elastic`), its recorded global batch spread over this launch's ranks (`training.larger_batches`)."""
    train = settings.train
    launch = plan_launch(
        output_dir,
        Launch(world_size(), train.batch_size, train.grad_accum, settings.loss.mini_batch_size),
        resuming=last_complete_checkpoint(output_dir) is not None,
        elastic=train.elastic,
        zero=train.deepspeed is not None,
        resize=larger_batches,
    )
    adapted = settings.model_copy(deep=True)
    adapted.train.batch_size, adapted.train.grad_accum = launch.batch_size, launch.grad_accum
    adapted.loss.mini_batch_size = launch.mini_batch_size
    return adapted


def matryoshka_dims(settings: ContrastiveSettings, dimension: int) -> list[int]:
    """The recipe's Matryoshka dimensions, each at most the model's embedding `dimension`."""
    dims = settings.loss.matryoshka_dims or []
    if any(d > dimension for d in dims):
        raise RecipeError(
            f"loss.matryoshka_dims {dims}: {max(dims)} exceeds the model's {dimension}-dimensional embeddings"
        )
    return dims


def scored_dims(settings: ContrastiveSettings, model) -> list[int]:
    """The Matryoshka dimensions the held-out sets are also scored at: those below the full one."""
    dimension = model.get_embedding_dimension()
    return [d for d in matryoshka_dims(settings, dimension) if d != dimension]


def evaluate(trainer: ContrastiveTrainer, note: dict[str, float] | None = None) -> dict[str, float]:
    """The held-out sets' metrics for the model as it is now: the trainer's own evaluation at this step when
    it made one, else a new one, appended to metrics.jsonl as the trainer logs its evaluations. A `note`
    (what changed in the weights since the trainer's evaluation) forces a new one and goes into its line."""
    step = trainer.state.global_step
    made = [
        e
        for e in trainer.state.log_history
        if e.get("step") == step and any(k.startswith("eval_") for k in e)
    ]
    if made and not note:
        return made[-1]
    assert trainer.evaluator is not None  # called only where the run has held-out sets
    metrics = trainer.evaluator(trainer.model)
    assert isinstance(metrics, dict)  # build_evaluator's SequentialEvaluator returns every set's metrics
    log_line(trainer, {**(note or {}), **{f"eval_{k}": v for k, v in metrics.items()}})
    return metrics


def log_line(trainer: ContrastiveTrainer, line: dict) -> None:
    """A line of this step in metrics.jsonl, as the trainer logs (by the first process only)."""
    if trainer.is_world_process_zero():
        assert trainer.args.output_dir is not None  # trainer_arguments always sets it
        append_jsonl(
            Path(trainer.args.output_dir) / METRICS_FILE, {"step": trainer.state.global_step, **line}
        )


def recorded_before(settings: ContrastiveSettings) -> dict[str, float]:
    """A resumed run's step-0 metrics from its metrics.jsonl, if it recorded them with the same held-out sets
    it scores now (the eval section may change on resume)."""
    output_dir = Path(settings.train.output_dir)
    recorded = recorded_recipe(output_dir)
    if (
        recorded.get("eval") != settings.eval.model_dump(mode="json")
        or not (output_dir / METRICS_FILE).exists()
    ):
        return {}
    lines = (json.loads(line) for line in (output_dir / METRICS_FILE).read_text().splitlines())
    return next(
        (line for line in lines if line.get("step") == 0 and any(k.startswith("eval_") for k in line)), {}
    )


def run_contrastive(settings: ContrastiveSettings) -> ContrastiveResult:
    """Train per `settings` (resuming from the newest complete checkpoint), export, and return the steps, each
    held-out set's scores before and after training, and the export (also written as summary.json). The steps
    every trainer shares are `training.run_job`'s; `ContrastiveJob` fills in the rest."""
    return run_job(ContrastiveJob(settings), settings.train, Path(settings.train.output_dir))


class ContrastiveJob:
    """Contrastive fine-tuning as a `training.Job`: the trainer and the held-out scores before training, then
    the WiSE-FT weight, the scores after and the export."""

    def __init__(self, settings: ContrastiveSettings) -> None:
        self.settings = settings

    def prepare(self) -> Prepared:
        settings = self.settings
        trainer = build_trainer(settings)
        resume = last_complete_checkpoint(Path(settings.train.output_dir))
        self.dims = scored_dims(settings, trainer.model)
        self.before = None
        if trainer.evaluator is not None:
            before = evaluate(trainer) if resume is None else recorded_before(settings)
            self.before = set_scores(before, settings.eval, self.dims)
        return Prepared(trainer, resume)

    def finish(self, prepared: Prepared) -> ContrastiveResult:
        settings, trainer, before, dims = self.settings, prepared.trainer, self.before, self.dims
        model, sources = trainer.model, trainer.sources
        output_dir = Path(settings.train.output_dir)
        after = None
        note, base_weight, choice = None, settings.export.base_weight, None
        if base_weight:  # before the last evaluation, so it scores the weights exported
            base = settings.model
            mix = WeightMix(model, base.base, base.pooling, base.max_length, base.trust_remote_code)
            if base_weight == "auto":
                choice = choose_export(
                    mix,
                    trainer.selection,
                    settings.export.base_weights,
                    mixable_weights(trainer, settings.export.checkpoints),
                    settings.data.prompts,
                    settings.eval.batch_size,
                    log=lambda point: log_line(trainer, {"selection": point}),
                )
                base_weight = choice.base_weight
            mix.apply(base_weight)
            note = {"base_weight": base_weight}
        if trainer.evaluator is not None:
            after = set_scores(evaluate(trainer, note), settings.eval, dims)
        result = ContrastiveResult(
            trainer.state.global_step,
            before or None,
            after or {},
            base_weight=base_weight,
            selection=choice.curve if choice else None,
            exported_step=choice.step if choice else trainer.state.global_step,
        )
        if trainer.is_world_process_zero():
            export_path = Path(settings.export.path or output_dir / "neobert-embed")
            heldout = describe_sets(settings.eval, trainer.evaluator)
            facts = training_facts(
                settings,
                trainer.contrastive_loss.config,
                model,
                sources,
                result.steps,
                before,
                after,
                heldout,
            )
            facts.base_weight, facts.selection = result.base_weight, result.selection
            facts.exported_step = result.exported_step
            named = prompts.named_prompts(settings.data.prompts, sources)
            facts.max_seq_length = model.max_seq_length = declared_max_seq_length(
                model, settings.export.max_seq_length
            )
            export_model(model, export_path, facts, named)
            result.export = str(export_path)
            result.write(output_dir / "summary.json")
            write_curves(output_dir)  # again: the final evaluation may have logged after training ended
        return result


def mixable_weights(trainer, checkpoints: str) -> list[Tuned]:
    """The weights export.base_weight auto may mix with the base: those training ended with, and with
    export.checkpoints all every earlier complete checkpoint the run kept, newest first."""
    final = trainer.state.global_step
    if checkpoints == "last":
        return [(final, None)]

    def reader(path: Path):
        def read() -> dict:
            trainer._load_from_checkpoint(str(path))  # how the Trainer itself restores one on resume
            return trainer.model.state_dict()

        return read

    earlier = complete_checkpoints(Path(trainer.args.output_dir))
    return [(final, None), *((step, reader(path)) for step, path in earlier if step < final)]
