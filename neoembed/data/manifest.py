"""Source manifests: one YAML per contrastive source, validated into typed settings.

Validation is two-step. `load_manifest` checks the file on its own (known fields, types, parseable field
paths); `check_columns` checks the mapping against the columns of the loaded dataset. Both raise
`ManifestError` naming the manifest file and the field.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from neoembed.data.mapping import FieldPath, PathError
from neoembed.data.pairs_file import ColumnMap, PairsFile
from neoembed.errors import InputError
from neoembed.recipes import RecipeError, StrictSettings, describe_validation_error, read_yaml_mapping


class ManifestError(InputError):
    """A manifest that is unreadable, ill-typed, or does not fit its dataset; the message names file and field."""


class _Strict(StrictSettings):
    """Manifest sections: the settings base, read-only once loaded."""

    model_config = ConfigDict(frozen=True)


class Mapping(_Strict):
    query: str
    positive: str
    negatives: list[str] = Field(default_factory=list)
    score: str | None = None  # STS-style sources: a numeric column filtered by options.min_score
    # Relation columns, each holding a value or a list of values (a WordNet synset, its lemmas, a question
    # thread): rows sharing a value of any of them never mine each other's positives as negatives. Each path
    # is a relation kind, by which the build's stats count the candidates it removed.
    relations: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _group_is_one_relation(cls, data):
        """`group: column`, the older spelling for a single relation, reads as `relations: [column]`."""
        if isinstance(data, dict) and "group" in data:
            data = dict(data)
            group = data.pop("group")
            if data.get("relations"):
                raise ValueError("give relations or group (a single relation), not both")
            data["relations"] = [] if group is None else [group]
        return data

    @field_validator("query", "positive", "score")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None:
            FieldPath.parse(value)
        return value

    @field_validator("negatives", "relations", mode="before")
    @classmethod
    def _paths(cls, value):
        value = [value] if isinstance(value, str) else value
        for item in value or []:
            FieldPath.parse(item)
        return value

    @field_validator("relations")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"relations named twice: {value}")
        return value

    def paths(self) -> dict[str, FieldPath]:
        """Field name (e.g. `negatives[1]`) -> parsed path, for checking and reading."""
        named = {"query": self.query, "positive": self.positive}
        named.update({f"negatives[{i}]": p for i, p in enumerate(self.negatives)})
        if self.score:
            named["score"] = self.score
        named.update({f"relations[{i}]": p for i, p in enumerate(self.relations)})
        return {name: FieldPath.parse(path) for name, path in named.items()}


class Subset(_Strict):
    config: str | None = None
    split: str


class Retrieval(_Strict):
    """An MTEB/BEIR retrieval dataset: queries and corpus joined through qrels with a positive score."""

    corpus: Subset = Subset(config="corpus", split="corpus")
    queries: Subset = Subset(config="queries", split="queries")
    qrels: Subset = Subset(config="default", split="train")
    title_in_positive: bool = False


class Options(_Strict):
    min_chars: int = Field(3, ge=0)
    max_chars: int = Field(8000, gt=0)
    min_score: float | None = None
    mine: Literal["auto", "always", "never"] = "auto"  # auto: mine only when the mapping has no negatives
    wordnet_pairs: list[Literal["example_gloss", "lemmas_gloss", "synonyms"]] = [
        "example_gloss",
        "lemmas_gloss",
        "synonyms",
    ]


StsRule = Literal["intended", "release"]
PACKAGE_KINDS = ("wordnet", "manpages", "packages")  # read from Debian's mirror, not from a dataset hub


class Manifest(_Strict):
    name: str
    description: str
    # rows, retrieval: a hub dataset; wordnet, manpages, packages: Debian's data read by neoembed (`PACKAGE_KINDS`);
    # file: your own pairs file, folder or saved dataset (`data.pairs_file`), its columns named by `columns`
    kind: Literal["rows", "retrieval", "wordnet", "manpages", "packages", "file"] = "rows"
    dataset: str | None = None
    path: str | None = None  # kind file: the file, folder or saved dataset
    columns: ColumnMap = Field(default_factory=dict)  # kind file: role -> columns, where not the known names
    config: str | None = None
    split: str = "train"
    revision: str | None = Field(None, pattern=r"^[0-9a-f]{40}$")
    licence: str
    licence_source: str = Field(description="where the licence is stated (a card, a paper, mteb's metadata)")
    expected_rows: int | None = Field(None, ge=0)  # rows of the split at `revision` (at head if unpinned)
    # Rows the paper's ~9M mix takes from this source (docs/data.md, "The paper's mix"): the build reads
    # the first `budget` rows in the source's streaming order, streaming, so a capped source never
    # downloads whole. None: the whole source.
    budget: int | None = Field(None, ge=1)
    paper: str = Field(description="where the source comes from: 'release', 'paper', 'embedded' or 'user'")
    note: str | None = None
    mapping: Mapping
    retrieval: Retrieval | None = None
    options: Options = Options()
    # Query and positive are interchangeable (duplicate questions, STS pairs): (a, b) and (b, a) are one pair
    # to the dedup, and `--both-directions` trains on both orders.
    symmetric: bool = False

    @model_validator(mode="after")
    def _kind_fields(self) -> Manifest:
        if self.kind not in (*PACKAGE_KINDS, "file") and not self.dataset:
            raise ValueError(f"kind {self.kind!r} needs a dataset id")
        if (self.kind == "file") != (self.path is not None):
            raise ValueError("path (your pairs file) is for kind file, and kind file needs it")
        if (self.kind == "retrieval") != (self.retrieval is not None):
            raise ValueError("a 'retrieval' section is required for kind retrieval and only there")
        if self.paper not in ("release", "paper", "embedded", "user"):
            raise ValueError(f"paper must be 'release', 'paper', 'embedded' or 'user', got {self.paper!r}")
        return self

    def with_sts_rule(self, rule: StsRule) -> Manifest:
        """The manifest as a build with this STS rule reads it.

        `intended` keeps `options.min_score` (pairs scoring >= 4 of 5). `release` drops the score filter, as
        the code release did: it computes `dataset.filter(score > 4)` and discards the result, so it trained
        on every STS12 and STS Benchmark train pair, score 0 included.
        """
        if rule == "intended" or self.options.min_score is None:
            return self
        return self.model_copy(update={"options": self.options.model_copy(update={"min_score": None})})

    @property
    def mines_by_default(self) -> bool:
        return self.options.mine == "always" or (self.options.mine == "auto" and not self.mapping.negatives)


def load_manifest(path: Path) -> tuple[Manifest, str]:
    """Parse and validate one manifest; returns it with the sha256 of its bytes (part of the build hash)."""
    try:
        data = read_yaml_mapping(path)
        manifest = Manifest.model_validate(data)
    except RecipeError as err:
        raise ManifestError(str(err)) from None
    except ValidationError as err:
        raise ManifestError(f"{path}: {describe_validation_error(err)}") from None
    if manifest.name != path.stem:
        raise ManifestError(f"{path}: field name: {manifest.name!r} must equal the file name {path.stem!r}")
    return manifest, hashlib.sha256(path.read_bytes()).hexdigest()


def load_manifests(directory: Path, names: list[str] | None = None) -> dict[str, tuple[Manifest, str]]:
    """All manifests in `directory` (sorted by name: the build order), or the named ones."""
    directory = Path(directory)
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise ManifestError(f"{directory}: no *.yaml manifests found")
    available = {f.stem: f for f in files}
    if names:
        unknown = [n for n in names if n not in available]
        if unknown:
            raise ManifestError(f"unknown source(s) {unknown}; manifests in {directory}: {sorted(available)}")
        files = [available[n] for n in sorted(set(names))]
    return {f.stem: load_manifest(f) for f in files}


def file_manifest(pairs: PairsFile) -> tuple[Manifest, str]:
    """Your pairs file as a build source: its rows read as the roles `query`, `positive` and `negatives`
    (`PairsFile.batches`), negatives mined where it has none, any text of at least one character kept; with
    the digest of its bytes and column mapping, which a rebuild compares."""
    manifest = Manifest(
        name=pairs.name,
        description=f"your pairs: {pairs.path}",
        kind="file",
        path=str(pairs.path),
        columns=pairs.mapping,
        licence="the file's own",
        licence_source=f"whoever made {pairs.path}",
        paper="user",
        mapping=Mapping(
            query="query",
            positive="positive",
            negatives=["negatives"] if "negatives" in pairs.mapping else [],
        ),
        options=Options(min_chars=1),
    )
    return manifest, hashlib.sha256(f"{manifest.model_dump_json()}|{pairs.digest}".encode()).hexdigest()


def check_columns(manifest: Manifest, features: dict, where: str) -> None:
    """Check every mapping path against the dataset's features; the error names manifest and field."""
    for name, path in manifest.mapping.paths().items():
        try:
            path.check_features(features)
        except PathError as err:
            raise ManifestError(
                f"manifest {manifest.name}: field mapping.{name}: {err} (in {where})"
            ) from None
