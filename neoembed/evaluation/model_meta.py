"""The mteb ``ModelMeta`` an exported embedder carries (``mteb_model_meta.json``, written by
``neoembed.contrastive``'s export): ``mteb-eval`` evaluates the model under it."""

from __future__ import annotations

import json
from pathlib import Path

from neoembed.errors import InputError

META_FILE = "mteb_model_meta.json"


def read_model_meta(directory: Path):
    """The ModelMeta stored in an embedder directory, or None when it has none."""
    from neoembed.mteb_setup import mteb

    from pydantic import ValidationError

    path = Path(directory) / META_FILE
    if not path.is_file():
        return None
    try:
        return mteb.models.ModelMeta.model_validate_json_resolved(path.read_text(encoding="utf-8"))
    except (ValidationError, json.JSONDecodeError) as err:
        raise InputError(f"{path}: not an mteb ModelMeta ({err})", param="--model") from err
