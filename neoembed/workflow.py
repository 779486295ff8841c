"""What the design card's lines choose when typed with no flags, and the first line that says so.

    neoembed pretrain                  pretrain-cpu: a 4 x 128 NeoBERT on WordNet -> runs/pretrain-cpu/final
    neoembed contrastive --steps 2000  contrastive-neobert-cpu on that NeoBERT where it exists, else
                                       contrastive-cpu on the packaged MiniLM; either builds the data its
                                       recipe reads first where it is missing (`data.build`)
    neoembed mteb-eval                 the exports those recipes wrote here, each beside its base, and bm25,
                                       on the offline benchmark neoembed-local
    SentenceTransformer("neobert-embed")   the export, ./neobert-embed

Every choice is read from the packaged recipes (their output and export paths), never retyped here. Each
command's first line (`plan: ...`) names what it chose and the flag that chooses otherwise (`announce`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neoembed.contrastive import BASE_TEACHER, ContrastiveSettings, HeldOutSet
from neoembed.data import ColumnMap, is_pairs_path, open_pairs
from neoembed.errors import InputError
from neoembed.packaged import resolve_recipe
from neoembed.pretrain import PretrainSettings
from neoembed.recipes import load_recipe
from neoembed.training import world_size

if TYPE_CHECKING:
    from neoembed.data import BuildConfig
    from neoembed.evaluation import MtebEvalSettings

PRETRAIN_RECIPE = "pretrain-cpu"  # `neoembed pretrain`; --recipe neobert-stage1 is the paper's
NEOBERT_RECIPE = "contrastive-neobert-cpu"  # `neoembed contrastive` after `neoembed pretrain`
MINILM_RECIPE = "contrastive-cpu"  # `neoembed contrastive` with no pretrained NeoBERT here
CONTRASTIVE_RECIPES = (NEOBERT_RECIPE, MINILM_RECIPE)  # whose exports `neoembed mteb-eval` looks for


@dataclass(frozen=True)
class RecipeChoice:
    """The recipe a recipe verb runs: the one named by --recipe, or the verb's default."""

    name: str
    given: bool  # named by --recipe


@dataclass(frozen=True)
class Choice:
    """One thing a command chose, why, and the flag that chooses otherwise."""

    what: str  # recipe, model, data, output, ...
    value: str
    flag: str
    why: str = ""

    def __str__(self) -> str:
        why = f"{self.why}; " if self.why else ""
        return f"{self.what} {self.value} ({why}{self.flag})"


def announce(choices: list[Choice]) -> str:
    """The command's first line: `plan: recipe R (why; --recipe ...); model M (--model.base); ...` (not
    `neoembed VERB: ...`, which is how an error reads)."""
    return "plan: " + "; ".join(map(str, choices))


def pretrain_output(settings: PretrainSettings) -> Path:
    """The model directory a pretraining run leaves (the trainer writes `<output_dir>/final`)."""
    return Path(settings.train.output_dir) / "final"


def default_pretrained() -> Path:
    """Where `neoembed pretrain`, typed with no flags, leaves its model."""
    return pretrain_output(_load(PRETRAIN_RECIPE, PretrainSettings))


def default_contrastive_recipe() -> str:
    """contrastive-neobert-cpu where `neoembed pretrain` has left its model here, else contrastive-cpu."""
    return NEOBERT_RECIPE if default_pretrained().is_dir() else MINILM_RECIPE


def export_path(settings: ContrastiveSettings) -> Path:
    """The sentence-transformers directory a contrastive run exports."""
    return Path(settings.export.path or Path(settings.train.output_dir) / "neobert-embed")


def builds_its_data(settings: ContrastiveSettings) -> bool:
    """Whether `neoembed contrastive` builds data.path where it is missing: the recipe's data.build writes
    that very path (a `--data.path` elsewhere is the user's data, not the recipe's)."""
    build = settings.data.build
    return build is not None and build.out is not None and Path(build.out) == Path(settings.data.path)


def pretrain_choices(settings: PretrainSettings, recipe: RecipeChoice) -> list[Choice]:
    why = "" if recipe.given else "the default"
    from neoembed.pretrain.neobert import NeoBERTConfig  # here: it loads transformers (`--help` must not)

    config = settings.model.config or {}
    # A config may name only some fields (max_length alone, say): the rest are NeoBERT's defaults.
    layers = config.get("num_hidden_layers", NeoBERTConfig.num_hidden_layers)
    width = config.get("hidden_size", NeoBERTConfig.hidden_size)
    paper = (layers, width) == (NeoBERTConfig.num_hidden_layers, NeoBERTConfig.hidden_size)
    shape = f"{layers} x {width}" + (" (the paper's)" if paper else "")
    return [
        Choice("recipe", recipe.name, "--recipe neobert-stage1 for the paper's 250M", why),
        Choice("model", f"NeoBERT {shape}", "--model.config"),
        Choice("data", _corpus_text(settings), "--corpus.files, --corpus.dataset"),
        precision_choice(settings.train.precision),
        Choice("output", str(pretrain_output(settings)), "--train.output_dir"),
    ]


def precision_choice(requested: str) -> Choice:
    """The training precision, and for `auto` on a CPU what decided it (bf16 only where it measured faster)."""
    from neoembed.precision import resolve_precision

    resolved = resolve_precision(requested)
    used = "bf16" if resolved.train_bf16 else "fp16" if resolved.train_fp16 else "fp32"
    other = "fp32" if used != "fp32" else "bf16"
    return Choice(
        "precision", used, f"--train.precision {other}", resolved.why if requested == "auto" else ""
    )


def contrastive_choices(settings: ContrastiveSettings, recipe: RecipeChoice) -> list[Choice]:
    if recipe.given:
        why = ""
    elif recipe.name == NEOBERT_RECIPE:
        why = f"{default_pretrained()} is here, from `neoembed pretrain`"
    else:
        why = f"no {default_pretrained()} here to fine-tune"
    other = MINILM_RECIPE if recipe.name == NEOBERT_RECIPE else NEOBERT_RECIPE
    data = Path(settings.data.path)
    if is_pairs_path(data):
        into = pairs_build_dir(settings)
        built = "built" if (into / "stats.json").is_file() else "built first"
        data_why = f"your pairs, {built} into {into}; 1 anchor in 10 held out to test"
    else:
        data_why = (
            "missing: built first"
            if not (data / "stats.json").is_file() and builds_its_data(settings)
            else ""
        )
    choices = [
        Choice("recipe", recipe.name, f"--recipe {other}, contrastive-neobert for the paper's", why),
        Choice("model", settings.model.base, "--model.base"),
        Choice("data", str(data), "--data.path", data_why),
        Choice("steps", str(settings.train.max_steps), "--steps"),
        precision_choice(settings.train.precision),
        Choice("output", str(export_path(settings)), "--export.path"),
    ]
    if is_pairs_path(data) and (guard := forgetting_guard(settings)) is not None:
        choices.append(guard)
    return choices


def forgetting_guard(settings: ContrastiveSettings) -> Choice | None:
    """What in the recipe holds the model near its base, and the setting that lets your pairs move it further:
    said on the first line where the data is yours (the recipe's guard was chosen for other text)."""
    loss = settings.loss
    if loss.distill is not None and loss.distill.teacher == BASE_TEACHER:
        what = f"distillation from the base model (weight {loss.distill.weight})"
        release = "--loss.distill null to train on your pairs alone"
    elif loss.base_pull:
        what, release = f"a pull toward the base weights ({loss.base_pull})", "--loss.base_pull 0 releases it"
    elif settings.export.base_weight != 0.0:
        what, release = f"base weight {settings.export.base_weight} in the export", "--export.base_weight 0"
    else:
        return None
    return Choice("guard", f"{what} keeps the model near its base", release, "against forgetting")


def pairs_build_dir(settings: ContrastiveSettings) -> Path:
    """Where `neoembed contrastive --data.path FILE` builds your pairs: under the run (`your_pairs_dir`)."""
    return your_pairs_dir(settings.data.path, settings.data.columns, Path(settings.train.output_dir) / "data")


def your_pairs_dir(path: str | Path, columns: ColumnMap, root: Path) -> Path:
    """The build of your pairs under `root`: one per content of the file and column mapping, so a re-run
    finds it and a changed file gets a build of its own."""
    pairs = open_pairs(path, columns, option="--data.columns")
    return root / f"{pairs.name}-{pairs.digest[:12]}"


def build_your_pairs(path: str | Path, columns: ColumnMap, out: Path) -> str | None:
    """Build your pairs into `out` as `neoembed contrastive --data.path` trains on them (no mined negatives,
    the held-out split kept out); the first line of what it did, or None where `out` is built already."""
    from neoembed.data import BuildConfig, build

    if (out / "stats.json").is_file():
        return None
    result = build(BuildConfig(out=out, pairs=(Path(path),), columns=columns, mine=False))
    assert result is not None  # a whole build (no --shard): its result
    return "; ".join(result.sources)


def ensure_data(settings: ContrastiveSettings, echo: Callable[[str], None]) -> ContrastiveSettings:
    """The settings to train with, their data built: the recipe's where it is missing, as `data.build` says;
    your pairs file (`--data.path FILE`) into `pairs_build_dir`, its held-out split scored first among the
    held-out sets. Other missing data (no `data.build`, or `--data.path` elsewhere than it builds) is left to
    the trainer, whose error names it after the run's lock is taken."""
    from neoembed.data import build
    from neoembed.evaluation import benchmark_texts

    if is_pairs_path(settings.data.path):
        return _with_your_pairs(settings, echo)
    out, config = Path(settings.data.path), settings.data.build
    if config is None or (out / "stats.json").is_file() or not builds_its_data(settings):
        return settings
    if world_size() > 1:  # every rank would start the same build; one command builds it for all of them
        raise InputError(
            f"{out} is missing: build it before a multi-process launch, with {build_command(config)}",
            param="--data.path",
        )
    echo(f"building {out} first: {build_command(config)}")
    result = build(config, benchmark=benchmark_texts(config.eval_benchmark, config.eval_benchmark_missing))
    assert result is not None  # a whole build (no --shard): its result
    echo(f"wrote {result.rows_out} rows from {result.rows_read} read to {out}")
    return settings


def _with_your_pairs(settings: ContrastiveSettings, echo: Callable[[str], None]) -> ContrastiveSettings:
    """Your pairs file built (once per content) and trained on, its held-out split the first held-out set."""
    given, out = settings.data.path, pairs_build_dir(settings)
    if world_size() > 1 and not (out / "stats.json").is_file():
        raise InputError(
            f"{given} is not built yet: build it before a multi-process launch, with neoembed build-data "
            f"--from {given} --out {out} --no-mine",
            param="--data.path",
        )
    if (built := build_your_pairs(given, settings.data.columns, out)) is not None:
        echo(f"built your pairs into {out}: {built}")
    test_set = HeldOutSet(kind="files", path=given, columns=settings.data.columns)
    others = [s for s in settings.eval.sets if s.label != test_set.label]
    return settings.model_copy(
        update={
            "data": settings.data.model_copy(update={"path": str(out), "columns": {}, "build": None}),
            "eval": settings.eval.model_copy(update={"sets": [test_set, *others]}),
        }
    )


def build_command(config: BuildConfig) -> str:
    """The `neoembed build-data` line that builds what `config` builds: its fields that differ from the
    library's defaults, each as the option `build-data` binds it to (a nested field by its leaf name)."""
    parts = ["neoembed build-data"]
    for name, value in _leaves(config.model_dump(exclude_defaults=True, mode="json")):
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            parts.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, list):
            parts.append(f"{flag} {','.join(map(str, value))}")
        else:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def eval_choices(settings: MtebEvalSettings) -> tuple[MtebEvalSettings, list[Choice]]:
    """`settings` with the card's defaults filled in where the command line gave no models or tasks: the
    exports the default contrastive recipes wrote here, each with the base its recipe names, then bm25; the
    offline benchmark."""
    from neoembed.evaluation import LOCAL_BENCHMARK  # loads mteb: only where it evaluates

    update: dict[str, Any] = {}
    choices: list[Choice] = []
    if not settings.models:
        recipes = [_load(name, ContrastiveSettings) for name in CONTRASTIVE_RECIPES]
        exports = [(export_path(recipe), recipe.model.base) for recipe in recipes]
        models = [name for path, base in exports if path.is_dir() for name in (str(path), base)]
        if not models:
            raise InputError(
                "no model to evaluate: give -m MODEL, or run `neoembed contrastive` here first (it exports "
                + " or ".join(str(path) for path, _ in exports)
                + ")",
                param="--model",
            )
        update["models"] = (*dict.fromkeys(models), "bm25")
        choices.append(
            Choice("models", ", ".join(update["models"]), "-m", "what `neoembed contrastive` wrote here")
        )
    else:
        choices.append(Choice("models", ", ".join(settings.models), "-m"))
    if not (settings.tasks or settings.benchmark or settings.task_types):
        update["benchmark"] = LOCAL_BENCHMARK
        choices.append(
            Choice("benchmark", LOCAL_BENCHMARK, '--benchmark "MTEB(eng, v1)" for the paper\'s', "offline")
        )
    choices.append(Choice("output", str(settings.output), "-o"))
    return settings.model_copy(update=update), choices


def _leaves(values: dict) -> list[tuple[str, object]]:
    return [
        leaf
        for name, value in values.items()
        for leaf in (_leaves(value) if isinstance(value, dict) else [(name, value)])
    ]


def _corpus_text(settings: PretrainSettings) -> str:
    corpus = settings.corpus
    if corpus.wordnet:
        return "WordNet's training synsets"
    if corpus.dataset:
        return corpus.dataset
    return ", ".join(corpus.files)


def _load(name: str, settings_cls):
    return load_recipe(resolve_recipe(name), settings_cls)
