"""Write the fine-tuned model as a sentence-transformers directory with a model card.

For a NeoBERT base the directory also carries NeoBERT's source (config, rope, attention, modeling: they import
only each other) and an `auto_map` in config.json, so `SentenceTransformer(dir, trust_remote_code=True)` works
where neoembed is not installed; with neoembed imported, the registered Auto classes load it without remote code.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from neoembed.contrastive.lora import has_adapters, merge_adapters

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
    if model[0].auto_model.config.model_type == "neobert":
        add_remote_code(path)
    (path / "README.md").write_text(model_card(card, model.prompts), encoding="utf-8")
    return path


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
inputs are truncated at {card["max_length"]} tokens.{matryoshka}

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
