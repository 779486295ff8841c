"""The exported model's README.md: sentence-transformers' model card plus neoembed's facts about the run.

While it trains, sentence-transformers' trainer fills the model's `SentenceTransformerModelCardData`
(hyperparameters, the loss and its configuration, per-source dataset statistics and examples, training logs,
evaluator results), and the library's `generate_model_card` renders its card from it. neoembed adds what the
library cannot see: the base model as the recipe named it, the records directory and the rows of each
source, the steps trained, each held-out set's scores before and after fine-tuning with the relative change (a
drop on the cross-source set is the sign of a model that fit its training source), LoRA, Matryoshka, prompt
usage, distillation from a teacher, and the recipe, as one "Training with neoembed" section before the library's training details.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from neoembed.contrastive.result import relative_change
from neoembed.contrastive.settings import BASE_TEACHER, ContrastiveSettings, EvalSettings
from neoembed.data import leakage_summary, pairs_summary
from neoembed.embedder import MINILM_ALIASES
from neoembed.precision import resolve_precision

SECTION_BEFORE = "\n## Training Details\n"  # the library template's heading our section goes in front of


@dataclass
class TrainingFacts:
    """What the card states about a contrastive run."""

    name: str  # the export directory's name
    base_model: str  # as the recipe named it (the Hub id for the packaged MiniLM)
    steps: int
    temperature: float | None  # InfoNCE's; None: a loss outside the InfoNCE family
    dimension: int
    pooling: str
    normalized: bool
    max_length: int  # the fine-tuning truncation
    max_seq_length: int  # the input limit the export declares (export.max_seq_length)
    lora: dict | None  # the adapter settings, merged into the exported weights
    # the base model's share of the exported weights (export.base_weight, or auto's choice)
    base_weight: float
    matryoshka_dims: list[int]
    data_path: str
    rows: dict[str, int]  # source -> rows trained on
    heldout: dict[str, str]  # held-out set -> what it is
    metric_names: list[str]
    before: dict[str, dict[str, float]]  # held-out set -> metric -> value (empty: not measured)
    after: dict[str, dict[str, float]]
    recipe: dict
    infonce_weight: float = 1.0
    distillation: str | None = None  # e.g. "from **teacher** (weight 1.0): what it matched"
    selection: list[dict] | None = None  # export.base_weight auto: each candidate's selection scores
    exported_step: int | None = None  # the step whose weights were exported (None: the last, `steps`)
    leakage: str | None = None  # the build's leakage guard: what it kept out of training
    pairs: str | None = None  # the user's pairs files the build read, and what it did with their rows
    seed: int = 0  # train.seed: initial weights of new layers, data order, dropout
    precision: str = "fp32"  # how training computed, e.g. "bf16 autocast over fp32 weights"
    weight_dtype: str = "float32"  # the exported weights' dtype
    heldout_sources: list[str] = field(default_factory=list)  # held-out sets no training row comes from


def training_facts(
    settings: ContrastiveSettings,
    loss: dict,
    model,
    sources: dict,
    steps: int,
    before: dict | None,
    after: dict | None,
    heldout: dict[str, str] | None = None,
) -> TrainingFacts:
    """The facts of a finished run of `settings` that trained `model` with the loss whose `config` is `loss` on
    `sources` for `steps` steps and scored the `heldout` sets (name -> description) `before` and `after` (set ->
    metric -> value)."""
    dimension = model.get_embedding_dimension()
    dims = settings.loss.matryoshka_dims or []
    base_model = hub_name(settings.model.base)
    infonce = "temperature" in loss  # the shipped kinds, and any built on InfoNCELoss
    return TrainingFacts(
        name=Path(settings.export.path or "neobert-embed").name,
        base_model=base_model,
        steps=steps,
        temperature=loss["temperature"] if infonce else None,
        dimension=dimension,
        pooling=next((str(m.pooling_mode) for m in model if hasattr(m, "pooling_mode")), "?"),
        normalized=any(type(m).__name__ == "Normalize" for m in model),
        max_length=model.max_seq_length,
        max_seq_length=model.max_seq_length,
        lora=settings.model.lora.model_dump() if settings.model.lora else None,
        base_weight=0.0 if settings.export.base_weight == "auto" else settings.export.base_weight,
        matryoshka_dims=dims,
        data_path=str(settings.data.path),
        rows={name: len(d) for name, d in sources.items()},
        heldout=heldout or {},
        metric_names=["ndcg@10", "recall@1", "recall@10", "recall@100"]
        + [f"ndcg@10_dim{d}" for d in dims if d != dimension],
        before=before or {},
        after=after or {},
        recipe=settings.model_dump(mode="json"),
        infonce_weight=loss["weight"] if infonce else 0.0,
        distillation=distillation(loss.get("distill"), base_model, dimension),
        leakage=leakage_summary(Path(settings.data.path)),
        pairs=pairs_summary(Path(settings.data.path)),
        seed=settings.train.seed,
        precision=training_precision(settings.train.precision),
        weight_dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        heldout_sources=heldout_sources(settings.eval, sources),
    )


def selection_text(curve: list[dict] | None, weight: float, step: int | None) -> str:
    """How `export.base_weight: auto` chose: each candidate's nDCG@10 on the selection split, by checkpoint
    where several competed (export.checkpoints all)."""
    if not curve:
        return ""
    steps = list(dict.fromkeys(point.get("step") for point in curve))

    def scores(at) -> str:
        return ", ".join(
            f"{point['base_weight']:g}: {point['score']:.4f}"
            + (" (kept)" if (point["base_weight"], point.get("step")) == (weight, step) else "")
            for point in curve
            if point.get("step") == at
        )

    points = scores(steps[0]) if len(steps) == 1 else "; ".join(f"step {at}: {scores(at)}" for at in steps)
    groups = " and ".join(g.replace("_", "-") for g in ("in_domain", "general") if g in curve[0])
    which = "The base model's share" if len(steps) == 1 else "The checkpoint and the base model's share"
    return (
        f"\n{which} was chosen on a selection split ({groups} retrieval sets, held out of "
        f"training and of every evaluation set), mean nDCG@10 by share: {points}."
    )


def training_precision(requested: str) -> str:
    """How a run with `train.precision` `requested` computed on this machine, as the card states it."""
    resolved = resolve_precision(requested)
    mode = "bf16 autocast" if resolved.train_bf16 else "fp16 autocast" if resolved.train_fp16 else None
    return f"{mode} over fp32 weights" if mode else "fp32"


def heldout_sources(settings: EvalSettings, sources: dict) -> list[str]:
    """The held-out sets whose source trained nothing (FOLDOC; a records set of an untrained source): a score
    there measures transfer to unseen text, not only to unseen rows of a training source."""

    def source(spec) -> str | None:
        """The training source a set's texts come from: a records set's, your pairs file's own name, else
        the kind's."""
        return spec.source if spec.kind == "records" else spec.label if spec.kind == "files" else spec.kind

    return [s.label for s in settings.sets if source(s) not in sources]


def hub_name(model: str) -> str:
    """A model as the card names it: the packaged MiniLM by its Hub id."""
    return MINILM_ALIASES[-1] if model in MINILM_ALIASES else model


def distillation(distill: dict | None, base_model: str, dimension: int) -> str | None:
    """What the student learnt from its teacher, as the card says it: `distill` is the distillation loss's
    `config["distill"]` (None: no teacher)."""
    if distill is None:
        return None
    if distill["teacher"] == BASE_TEACHER:
        teacher = f"{base_model}, the base model before training"
    else:
        teacher = hub_name(distill["teacher"])
    if distill["target"] == "scores":
        target = (
            "KL divergence to the teacher's softmax over each query's in-batch documents, cosine / "
            f"temperature {distill['temperature']}"
        )
    else:
        target = f"the teacher's embeddings matched by {distill['distance_metric']} distance"
        target += f" through a learned projection (not exported) where they are not {dimension}-dimensional"
    return f"from **{teacher}** (weight {distill['weight']}): {target}"


def model_card(model, facts: TrainingFacts) -> str:
    """The library's card for `model` with neoembed's section; sets the card data fields neoembed knows."""
    from sentence_transformers.base.model_card import generate_model_card

    card_data = model.model_card_data
    card_data.model_name = facts.name
    if is_hub_id(facts.base_model):  # the library links the base model on the Hub
        card_data.base_model = facts.base_model
    card_data.add_tags(
        ["neoembed"] + ["infonce"] * bool(facts.infonce_weight) + ["distillation"] * bool(facts.distillation)
    )
    library_card = generate_model_card(model)
    section = neoembed_section(facts, model.prompts)
    head, heading, tail = library_card.partition(SECTION_BEFORE)
    if not heading:  # another library version's template: the section goes last
        return f"{library_card.rstrip()}\n\n{section}"
    return f"{head}\n{section}{heading}{tail}"


def _change_cell(before: float | None, after: float | None) -> str:
    change = relative_change(before, after)
    if change is None:
        return "-"
    return f"**{change:+.1%}**" if change < 0 else f"{change:+.1%}"  # a drop stands out


def score_table(facts: TrainingFacts) -> str:
    """Markdown: per held-out set a row before and a row after fine-tuning, and the relative change."""
    names = facts.metric_names
    lines = ["| held-out set | | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
    for label in facts.heldout:
        before, after = facts.before.get(label, {}), facts.after.get(label, {})
        shown = _heldout_label(facts, label)
        for stage, values in (("before fine-tuning", before), ("after fine-tuning", after)):
            cells = [f"{values[m]:.4f}" if m in values else "-" for m in names]
            lines.append(f"| {shown} | {stage} | " + " | ".join(cells) + " |")
        cells = [_change_cell(before.get(m), after.get(m)) for m in names]
        lines.append(f"| {shown} | relative change | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _heldout_label(facts: TrainingFacts, label: str) -> str:
    return f"{label} (held-out source)" if label in facts.heldout_sources else label


def is_hub_id(name: str) -> bool:
    return name.count("/") == 1 and not Path(name).exists()


def neoembed_section(facts: TrainingFacts, prompts: dict[str, str]) -> str:
    """Markdown: how the model was trained, on what, how to load and prompt it, and how it scored."""
    lora = (
        f" with LoRA adapters (r {facts.lora['r']}, alpha {facts.lora['alpha']}) merged into the weights"
        if facts.lora
        else ""
    )
    normalized = " and L2-normalised" if facts.normalized else ""
    averaged = (
        f"\nThe exported weights are {1 - facts.base_weight:g} x the fine-tuned weights + {facts.base_weight:g} x "
        "the base model's (weight-space ensembling, WiSE-FT); the scores after fine-tuning below are those of "
        "these exported weights."
        if facts.base_weight
        else ""
    ) + selection_text(facts.selection, facts.base_weight, facts.exported_step)
    matryoshka = (
        f"\nTrained as Matryoshka embeddings at {', '.join(map(str, facts.matryoshka_dims))} dimensions: the "
        "full embedding is the default; for a shorter one keep its first d values, e.g. "
        f'`SentenceTransformer("{facts.name}", truncate_dim={min(facts.matryoshka_dims)})`.'
        if facts.matryoshka_dims
        else ""
    )
    prompt_rows = "\n".join(f"| `{name}` | `{text!r}` |" for name, text in prompts.items() if text)
    usage = (
        'Prepend the training prompts by name, e.g. `model.encode(queries, prompt_name="query")`:\n\n'
        f"| prompt_name | prefix |\n|---|---|\n{prompt_rows}\n"
        if prompt_rows
        else "Trained without instruction prompts: encode texts as they are.\n"
    )
    rows = "| source | rows |\n|---|---:|\n" + "".join(
        f"| {name} | {n:,} |\n" for name, n in facts.rows.items()
    )
    rows += f"| **total** | **{sum(facts.rows.values()):,}** |"
    if facts.pairs:
        rows += f"\n\n{facts.pairs}"
    if facts.leakage:
        rows += f"\n\n{facts.leakage}"
    sets = "\n".join(
        f"- {_heldout_label(facts, label)}: {description}" for label, description in facts.heldout.items()
    )
    if facts.heldout_sources:
        sets += (
            "\n\nA *held-out source* trained nothing: its score measures transfer to text unlike the "
            "training data."
        )
    evaluation = (
        f"{sets}\n\n{score_table(facts)}"
        if facts.heldout
        else "No held-out evaluation was run (eval.sets empty)."
    )
    recipe = yaml.safe_dump(facts.recipe, sort_keys=False).strip()
    infonce = (
        f"InfoNCE (cosine similarity / temperature {facts.temperature}, in-batch and hard negatives, one "
        "source per step)"
    )
    if facts.distillation and facts.infonce_weight:
        objective = f"with {infonce} (weight {facts.infonce_weight}) plus distillation {facts.distillation}"
    elif facts.distillation:
        objective = f"by distillation {facts.distillation}; one source per step"
    elif facts.temperature is None:
        objective = "with the loss the training details below name, one source per step"
    else:
        objective = f"with {infonce}"
    steps = (
        f"{facts.steps} steps, exported at step {facts.exported_step}"
        if facts.exported_step not in (None, facts.steps)
        else f"{facts.steps} steps"
    )
    return f"""## Training with neoembed

Fine-tuned by `neoembed contrastive` from **{facts.base_model}** for **{steps}**{lora} {objective}.
Embeddings are {facts.dimension}-dimensional, {facts.pooling}-pooled{normalized}. **Input limit:
{facts.max_seq_length} tokens** (longer inputs are truncated; fine-tuned at {facts.max_length}). Trained in
{facts.precision} with seed {facts.seed}; the exported weights are {facts.weight_dtype}.{matryoshka}{averaged}

```python
from sentence_transformers import SentenceTransformer
import neoembed  # registers NeoBERT; without neoembed installed pass trust_remote_code=True instead
model = SentenceTransformer("{facts.name}")
```

{usage}
### Training data
Records: `{facts.data_path}`

{rows}

### Held-out evaluation
{evaluation}

### Recipe (seed {facts.seed})
```yaml
{recipe}
```
"""
