"""Write the fine-tuned model as a sentence-transformers directory with its model card (`model_card`).

For a NeoBERT base the directory also carries NeoBERT's source (config, rope, attention, modeling: they import
only each other) and an `auto_map` in config.json, so `SentenceTransformer(dir, trust_remote_code=True)` works
where neoembed is not installed; with neoembed imported, the registered Auto classes load it without remote code.
The module configs are written in the layout sentence-transformers 5 reads and 6 loads unchanged.
"""

from __future__ import annotations

import json
import logging
from importlib import resources
from importlib.util import find_spec
from pathlib import Path
from typing import Literal

from neoembed.contrastive.lora import has_adapters, merge_adapters
from neoembed.contrastive.model import BaseModelError
from neoembed.contrastive.model_card import TrainingFacts, is_hub_id, model_card
from neoembed.contrastive.model_meta import export_model_meta, write_model_meta
from neoembed.embedder import TOKENIZER_RECORD, position_limit, require_finite_weights, tokenizer_record
from neoembed.evaluation import META_FILE
from neoembed.extras import install_hint
from neoembed.run_files import write_json, write_text

log = logging.getLogger(__name__)

NEOBERT_SOURCES = ("config.py", "rope.py", "attention.py", "modeling.py")
NEOBERT_AUTO_MAP = {
    "AutoConfig": "config.NeoBERTConfig",
    "AutoModel": "modeling.NeoBERTModel",
    "AutoModelForMaskedLM": "modeling.NeoBERTForMaskedLM",
    "AutoModelForSequenceClassification": "modeling.NeoBERTForSequenceClassification",
}


def export_model(model, path: Path, facts: TrainingFacts, prompts: dict[str, str] | None = None) -> Path:
    """Save `model` to `path` (safetensors), add remote code for NeoBERT, and write the model card (README.md)
    stating `facts` and the mteb ModelMeta (mteb_model_meta.json) that `neoembed mteb-eval` evaluates it under.

    `prompts` (name -> prefix) go to config_sentence_transformers.json, so `encode(..., prompt_name=name)`
    prepends what training prepended. LoRA adapters are merged first: the directory is a plain model."""
    path = Path(path)
    if has_adapters(model):
        merge_adapters(model)
    require_finite_weights(model, what=f"export to {path}")
    model.prompts.update(prompts or {})
    model.save(str(path), safe_serialization=True, create_model_card=False)
    write_portable_configs(path, model)
    write_json(path / TOKENIZER_RECORD, tokenizer_record(path))
    if model[0].auto_model.config.model_type == "neobert":
        add_remote_code(path)
    write_text(path / "README.md", model_card(model, facts))
    if find_spec("mteb") is None:  # a machine that trains without mteb (neoembed.extras): no ModelMeta
        log.warning("mteb is not installed: no %s in %s (%s)", META_FILE, path, install_hint("mteb"))
        return path
    write_model_meta(
        export_model_meta(
            model,
            facts.name,
            data_path=Path(facts.data_path),
            sources=facts.rows,
            matryoshka_dims=facts.matryoshka_dims,
            adapted_from=facts.base_model if is_hub_id(facts.base_model) else None,
        ),
        path,
    )
    return path


def declared_max_seq_length(model, declared: Literal["train", "positions"] | int) -> int:
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
    """Copy NeoBERT's modeling sources beside the config, with `auto_map`, for `trust_remote_code` loading."""
    source = resources.files("neoembed.pretrain.neobert")
    config_file = next(path.rglob("config.json"))  # the Transformer module's folder (the root in ST 6)
    for name in NEOBERT_SOURCES:
        (config_file.parent / name).write_bytes(source.joinpath(name).read_bytes())
    config = json.loads(config_file.read_text())
    config["auto_map"] = NEOBERT_AUTO_MAP
    config_file.write_text(json.dumps(config, indent=2) + "\n")
