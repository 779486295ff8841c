"""mteb ``ModelMeta`` for exported embedders, written beside the weights (``neoembed mteb-eval`` reads it back
through ``neoembed.evaluation.read_model_meta``).

The meta names the model, its dimensions (Matryoshka ones included), max tokens, similarity and framework,
and the mteb datasets it was trained on. ``training_datasets`` is derived, not guessed: each source the model
was trained on is looked up in the build's ``stats.json`` for the Hugging Face dataset it was read from, and
every mteb task reading that same dataset is listed (MS MARCO's train split -> ``MSMARCO``). mteb then
computes zero-shot status from it. When the build did not record its datasets the field is left unset
(``None``), which mteb reports as "unknown" rather than as a false "zero-shot".
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from pathlib import Path

from neoembed.errors import InputError
from neoembed.evaluation import META_FILE


def mteb_tasks_by_dataset() -> dict[str, set[str]]:
    """mteb task names by the Hugging Face dataset path they read."""
    from neoembed.mteb_setup import all_tasks

    by_dataset: dict[str, set[str]] = {}
    for task in all_tasks():
        by_dataset.setdefault(task.metadata.dataset["path"], set()).add(task.metadata.name)
    return by_dataset


def training_datasets(data_path: Path, sources: Iterable[str]) -> set[str] | None:
    """The mteb tasks whose datasets the build at `data_path` read for `sources`; None when the build's
    stats.json is missing or predates recording each source's dataset."""
    stats_file = Path(data_path) / "stats.json"
    if not stats_file.is_file():
        return None
    try:
        built = json.loads(stats_file.read_text(encoding="utf-8"))["sources"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise InputError(f"{stats_file}: not a build-data stats file ({err})", param="data.path") from err
    sources = list(sources)
    if not sources or any("dataset" not in built.get(source, {}) for source in sources):
        return None  # an older build that did not record its datasets
    by_dataset = mteb_tasks_by_dataset()
    # A null dataset is a source read from local files (WordNet), which no mteb task reads.
    return set().union(*(by_dataset.get(built[source]["dataset"], set()) for source in sources))


def export_model_meta(
    model,
    name: str,
    *,
    data_path: Path,
    sources: Iterable[str],
    matryoshka_dims: Iterable[int] = (),
    adapted_from: str | None = None,
):
    """The ModelMeta of a fine-tuned SentenceTransformer `model` exported as directory `name`."""
    from neoembed.mteb_setup import mteb

    ScoringFunction = mteb.models.model_meta.ScoringFunction
    dimension = model.get_embedding_dimension()
    dims = sorted({dimension, *matryoshka_dims}, reverse=True)
    return mteb.models.ModelMeta.create_empty(
        overwrites={
            "name": f"local/{name}",  # mteb-eval's name for a local directory: results keep one identity
            "release_date": datetime.date.today().isoformat(),
            "n_parameters": sum(p.numel() for p in model.parameters()),
            "max_tokens": model.max_seq_length,
            "embed_dim": dims if len(dims) > 1 else dimension,
            "similarity_fn_name": ScoringFunction.from_str(model.similarity_fn_name),
            "framework": ["Sentence Transformers", "PyTorch"],
            "use_instructions": any(model.prompts.values()),
            "training_datasets": training_datasets(data_path, sources),
            "adapted_from": adapted_from,
        }
    )


def write_model_meta(meta, directory: Path) -> Path:
    path = Path(directory) / META_FILE
    # Not `to_dict`: it keeps only the largest of the Matryoshka dimensions.
    fields = meta.model_dump(mode="json", exclude={"loader"})
    path.write_text(json.dumps(fields, indent=2) + "\n", encoding="utf-8")
    return path
