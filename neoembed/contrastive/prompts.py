"""Per-source instruction prompts: one query prompt and one document prompt per source, with a default.

The recipe's `data.prompts` maps a source name (or `default`) to `{query, document}`; a field a source leaves
out falls back to the default's, and that to no prompt. Training hands the resolved strings to
sentence-transformers' trainer (`prompts` per dataset name and column), the held-out evaluator prepends the
evaluated source's pair, and the export stores them as the model's named prompts (`query`, `document`, and
`<source>_query` / `<source>_document` for sources with their own), so `encode(text, prompt_name="query")`
tokenises exactly what training saw.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from neoembed.contrastive.settings import PromptSettings
from neoembed.recipes import RecipeError

DEFAULT = "default"


def resolve(prompts: Mapping[str, PromptSettings], source: str | None) -> tuple[str, str]:
    """(query prompt, document prompt) for `source`."""
    default = prompts.get(DEFAULT, PromptSettings())
    own = prompts.get(source, PromptSettings()) if source else PromptSettings()
    query = own.query if own.query is not None else default.query
    document = own.document if own.document is not None else default.document
    return query or "", document or ""


def split_sources(
    prompts: Mapping[str, PromptSettings], groups: Mapping[str, str]
) -> dict[str, PromptSettings]:
    """`prompts` named by group (`neoembed adapt`'s pair methods, which several sources split) as data.prompts
    names them: each source (a key of `groups`, valued by its group) gets its group's, `default` stays."""
    named = {source: prompts[group] for source, group in groups.items() if group in prompts}
    return {**({DEFAULT: prompts[DEFAULT]} if DEFAULT in prompts else {}), **named}


def check_sources(prompts: Mapping[str, PromptSettings], sources: Iterable[str]) -> None:
    unknown = sorted(set(prompts) - {DEFAULT, *sources})
    if unknown:
        raise RecipeError(
            f"data.prompts names source(s) {unknown} that the training data does not have "
            f"(sources: {sorted(sources)}; use `{DEFAULT}` for every source)"
        )


def training_prompts(
    prompts: Mapping[str, PromptSettings], columns: Mapping[str, list[str]]
) -> dict[str, dict[str, str]]:
    """{source: {column: prompt}} for the trainer: the query column gets the query prompt, the positive and
    negative columns the document prompt. Empty when no prompt is set (the trainer then adds nothing)."""
    out = {}
    for source, names in columns.items():
        query, document = resolve(prompts, source)
        out[source] = {name: query if name == "query" else document for name in names}
    return out if any(p for per_source in out.values() for p in per_source.values()) else {}


def named_prompts(prompts: Mapping[str, PromptSettings], sources: Iterable[str]) -> dict[str, str]:
    """The export's prompts: the default pair as `query` / `document` (the names sentence-transformers'
    `encode_query` / `encode_document` use), plus each source with its own entry as `<source>_query` /
    `<source>_document`."""
    query, document = resolve(prompts, None)
    named = {"query": query, "document": document}
    for source in sources:
        if source in prompts and source != DEFAULT:
            named[f"{source}_query"], named[f"{source}_document"] = resolve(prompts, source)
    return named
