"""Write the fine-tuned model as a sentence-transformers directory with a model card.

For a NeoBERT base the directory also carries NeoBERT's source (config, rope, attention, modeling: they import
only each other) and an `auto_map` in config.json, so `SentenceTransformer(dir, trust_remote_code=True)` works
where neoembed is not installed; with neoembed imported, the registered Auto classes load it without remote code.
The module configs are written in the layout sentence-transformers 5 reads and 6 loads unchanged.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from neoembed.contrastive.lora import has_adapters, merge_adapters
from neoembed.contrastive.model import BaseModelError
from neoembed.embedder import position_limit

NEOBERT_SOURCES = ("config.py", "rope.py", "attention.py", "modeling.py")
NEOBERT_AUTO_MAP = {
    "AutoConfig": "config.NeoBERTConfig",
    "AutoModel": "modeling.NeoBERTModel",
    "AutoModelForMaskedLM": "modeling.NeoBERTForMaskedLM",
    "AutoModelForSequenceClassification": "modeling.NeoBERTForSequenceClassification",
}


def export_model(model, path: Path, card: dict, prompts: dict[str, str] | None = None) -> Path:
    """Save `model` to `path` (safetensors), add remote code for NeoBERT, and write README.md from `card`.

    `prompts` (name -> prefix) go to config_sentence_transformers.json, so `encode(..., prompt_name=name)`
    prepends what training prepended. LoRA adapters are merged first: the directory is a plain model."""
    path = Path(path)
    if has_adapters(model):
        merge_adapters(model)
    model.prompts.update(prompts or {})
    model.save(str(path), safe_serialization=True)
    write_portable_configs(path, model)
    if model[0].auto_model.config.model_type == "neobert":
        add_remote_code(path)
    (path / "README.md").write_text(model_card(card, model.prompts), encoding="utf-8")
    return path


def declared_max_seq_length(model, declared: str | int) -> int:
    """The max_seq_length the export of `model` (now truncating at its training length) declares, per the
    recipe's `export.max_seq_length`: "train", that training length; "positions", every position the base
    model supports (the training length where the config does not say); or a number up to that."""
    trained = int(model.max_seq_length)
    if declared == "train":
        return trained
    limit = position_limit(model)
    if declared == "positions":
        return limit or trained
    if limit is not None and declared > limit:
        raise BaseModelError(
            f"export.max_seq_length {declared} exceeds the {limit} positions the model supports; "
            f"use at most {limit}, or 'positions'"
        )
    return declared


# Module classes by the names every sentence-transformers version resolves (2.x-5.x directly, 6.x through
# its deprecated-import table), and Pooling's per-mode flags that 5.x reads and 6.x converts.
PORTABLE_MODULES = {
    "Transformer": "sentence_transformers.models.Transformer",
    "Pooling": "sentence_transformers.models.Pooling",
    "Normalize": "sentence_transformers.models.Normalize",
}
POOLING_FLAGS = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
    "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
    "weightedmean": "pooling_mode_weightedmean_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}


def write_portable_configs(path: Path, model) -> None:
    """Rewrite a Transformer + Pooling (+ Normalize) directory's module configs in the layout that
    sentence-transformers 5 reads and 6 still loads unchanged.

    Written here because sentence-transformers 6 saves only its own layout (module classes under
    `sentence_transformers.base...`, `sentence_bert_config.json` without `max_seq_length`, Pooling's
    `pooling_mode` string), which version 5 cannot load; weights, tokenizer and prompts are the same in both.
    Other module stacks are left in the 6.x layout.
    """
    modules = json.loads((path / "modules.json").read_text())
    kinds = [entry["type"].rsplit(".", 1)[-1] for entry in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        return
    for entry, kind in zip(modules, kinds, strict=True):
        entry["type"] = PORTABLE_MODULES[kind]
    transformer_dir = path / modules[0]["path"]
    (transformer_dir / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": model.max_seq_length, "do_lower_case": False}, indent=2) + "\n"
    )
    pooling_file = path / modules[1]["path"] / "config.json"
    pooling = json.loads(pooling_file.read_text())
    mode = pooling["pooling_mode"]
    modes = {mode} if isinstance(mode, str) else set(mode)
    legacy = {
        "word_embedding_dimension": pooling["embedding_dimension"],
        **{flag: name in modes for name, flag in POOLING_FLAGS.items()},
        "include_prompt": pooling.get("include_prompt", True),
    }
    pooling_file.write_text(json.dumps(legacy, indent=2) + "\n")
    (path / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")


def add_remote_code(path: Path) -> None:
    import neoembed.pretrain

    source = Path(neoembed.pretrain.__file__).parent
    config_file = next(path.rglob("config.json"))  # the Transformer module's folder (the root in ST 6)
    for name in NEOBERT_SOURCES:
        shutil.copyfile(source / name, config_file.parent / name)
    config = json.loads(config_file.read_text())
    config["auto_map"] = NEOBERT_AUTO_MAP
    config_file.write_text(json.dumps(config, indent=2) + "\n")


def model_card(card: dict, prompts: dict[str, str]) -> str:
    """A README.md: what the model is, what it was trained on and how, and how it scored."""
    evals = card.get("eval", {})
    rows = "\n".join(
        f"| {stage} | "
        + " | ".join(f"{metrics.get(k, float('nan')):.4f}" for k in card["metric_names"])
        + " |"
        for stage, metrics in evals.items()
    )
    header = (
        "| model | " + " | ".join(card["metric_names"]) + " |\n|---|" + "---|" * len(card["metric_names"])
    )
    sources = "\n".join(f"- {name}: {n} rows" for name, n in card["sources"].items())
    prompt_rows = "\n".join(f"| `{name}` | `{text!r}` |" for name, text in prompts.items() if text)
    usage = (
        'Prepend the training prompts by name, e.g. `model.encode(queries, prompt_name="query")`:\n\n'
        f"| prompt_name | prefix |\n|---|---|\n{prompt_rows}\n"
        if prompt_rows
        else "Trained without instruction prompts: encode texts as they are.\n"
    )
    adapter = card["recipe"]["model"].get("lora")
    lora = (
        f" with LoRA adapters (r {adapter['r']}, alpha {adapter['alpha']}) merged into the weights"
        if adapter
        else ""
    )
    dims = card.get("matryoshka_dims")
    matryoshka = (
        f"\nTrained as Matryoshka embeddings at {', '.join(map(str, dims))} dimensions: the full embedding is the "
        "default; for a shorter one keep its first d values, e.g. "
        f'`SentenceTransformer("{card["name"]}", truncate_dim={min(dims)})`.'
        if dims
        else ""
    )
    return f"""---
library_name: sentence-transformers
pipeline_tag: sentence-similarity
tags: [sentence-transformers, feature-extraction, neoembed, infonce]
base_model: {card["base_model"]}
---

# {card["name"]}

A sentence embedder fine-tuned by `neoembed contrastive` from **{card["base_model"]}** with InfoNCE (cosine
similarity / temperature {card["temperature"]}, in-batch and hard negatives, one source per step) for
**{card["steps"]} steps**{lora}. Embeddings are {card["dimension"]}-dimensional, {card["pooling"]}-pooled{" and L2-normalised" if card["normalized"] else ""};
inputs are truncated at {card["max_seq_length"]} tokens (fine-tuned at {card["max_length"]}).{matryoshka}

```python
from sentence_transformers import SentenceTransformer
import neoembed  # registers NeoBERT; without neoembed installed pass trust_remote_code=True instead
model = SentenceTransformer("{card["name"]}")
```

{usage}
## Training data
Data: `{card["data_path"]}`
{sources}

## Evaluation ({card["eval_name"]})
{header}
{rows}

## Recipe
```yaml
{yaml.safe_dump(card["recipe"], sort_keys=False).strip()}
```
"""
