"""`neoembed bench adapt`: `neoembed adapt` on three corpora of another kind than its base model's training
data, against the base model, plain sentence-transformers on the adaptation's own pairs for as many steps
(MNRL, as `bench contrastive`'s baseline) and on the same documents for as many minutes (TSDAE), and BM25,
over several seeds, with paired intervals.

- FOLDOC: the definitions of every FOLDOC entry as the user's documents, the ones the evaluation searches
  among them, and no term (so no term -> definition pair can enter training; the guard also leaves out any
  document equal to a held-out term), scored on FOLDOC term -> definition retrieval of the held-out terms.
- Debian package descriptions: the first `packages` of the fixed sample order, which begins with the 2,000
  the evaluation searches (its 500 synopses handed to the guard as evaluation queries), scored on synopsis
  -> description retrieval.
- The Jargon File: every distinct definition, as FOLDOC's, no term (the guard knows its 300 held-out terms
  itself, as FOLDOC's); scored on term -> definition retrieval among every definition.
- Forgetting: WordNet's held-out example -> definition and lemma -> definition, for every adapted model.
Each adapted model is compared with the base, with ST MNRL given its pairs, seed and steps, and with TSDAE
given the same corpus, seed and the minutes the adaptation's training took (`--baselines` leaves either out),
as `bench.comparison` compares.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import product
from pathlib import Path

from neoembed.bench import st_baseline
from neoembed.bench.comparison import (
    Arm,
    Check,
    Group,
    SeedAverages,
    Tables,
    above_zero,
    difference_cell,
    recipe_identity,
    relative,
    reuse_or_train,
    train_and_score,
)
from neoembed.bench.contrastive import LEMMA_TASK
from neoembed.bench.report import Report, Row, Table, WrittenReport, write_report
from neoembed.bench.settings import AdaptBench
from neoembed.bench.st_baseline import Budget, Trained
from neoembed.contrastive import evaluated_texts
from neoembed.errors import RunError
from neoembed.run_files import METRICS_FILE, read_jsonl, write_text

FOLDOC_TASK = "FOLDOCDefinitionRetrieval"
PACKAGES_TASK = "PackageDescriptionRetrieval"
JARGON_TASK = "JargonDefinitionRetrieval"
EXAMPLE_TASK = "WordNetExampleDefinitionRetrieval"
FORGETTING = (EXAMPLE_TASK, LEMMA_TASK)
COLUMNS = {
    FOLDOC_TASK: "FOLDOC term->definition",
    PACKAGES_TASK: "package synopsis->description",
    JARGON_TASK: "Jargon term->definition",
    EXAMPLE_TASK: "WordNet example->definition",
    LEMMA_TASK: "WordNet lemma->definition",
}
GAIN = 0.03  # the corpus's own held-out retrieval: mean relative gain over the base
MEAN_GAIN = 0.05  # that gain averaged over the corpora
FORGET = 0.005  # WordNet: no seed more than this below the base
MINUTES = 10.0  # the adaptation itself, pairs to export
METHODS = {"adapt": "neoembed adapt", "st": "ST MNRL", "tsdae": "ST TSDAE"}
COMPARISONS = (("adapt", None), ("st", None), ("tsdae", None), ("adapt", "st"), ("adapt", "tsdae"))


@dataclass(frozen=True)
class Corpus:
    name: str
    task: str  # its held-out retrieval task
    file: Path  # the documents, as a user hands them to `neoembed adapt`
    eval_texts: tuple[Path, ...] = ()  # evaluation texts the leakage guard keeps out of it


@dataclass(frozen=True)
class Adapted(Trained):
    """A finished `neoembed adapt` run: the trainer's figures, and the whole adaptation's."""

    minutes: float = 0.0  # corpus to export, wall clock
    base_weight: float = 0.0  # the WiSE-FT weight chosen on the selection split
    documents: int = 0  # documents adapted on
    pairs: dict[str, int] = field(default_factory=dict)  # method -> pairs made


def write_corpora(out: Path, names: Sequence[str], packages: int) -> list[Corpus]:
    """The corpora `names` as the files a user would hand `neoembed adapt` (the documents they will search
    among them), with the evaluation queries the guard keeps out besides the built-in held-out terms. A file
    is rewritten only when its content changed: an adaptation's pairs are tied to its corpus file's size and
    modification time, and a bench run again resumes on them."""
    from neoembed.data import jargon_retrieval, load_descriptions, load_entries, packages_retrieval

    def foldoc() -> tuple[Corpus, dict[Path, str]]:  # every definition, no term
        file = out / "foldoc.txt"
        return Corpus("foldoc", FOLDOC_TASK, file), {
            file: "".join(e.definition + "\n" for e in load_entries())
        }

    def described() -> tuple[Corpus, dict[Path, str]]:  # the held-out descriptions are the first of the order
        file, guarded = out / "packages.jsonl", out / "packages-queries.txt"
        documents = load_descriptions()[:packages]
        return Corpus("packages", PACKAGES_TASK, file, (guarded,)), {
            file: "".join(json.dumps({"text": d.description}) + "\n" for d in documents),
            guarded: "".join(text + "\n" for text in packages_retrieval()[0].values()),
        }

    def jargon() -> tuple[Corpus, dict[Path, str]]:  # every definition, no term
        file = out / "jargon.txt"
        return Corpus("jargon", JARGON_TASK, file), {
            file: "".join(d + "\n" for d in jargon_retrieval()[1].values())
        }

    makers = {"foldoc": foldoc, "packages": described, "jargon": jargon}
    out.mkdir(parents=True, exist_ok=True)
    corpora = []
    for name in names:
        corpus, files = makers[name]()
        for file, text in files.items():
            if not file.exists() or file.read_text(encoding="utf-8") != text:
                write_text(file, text)
        corpora.append(corpus)
    return corpora


def adapt_settings(bench: AdaptBench, corpus: Corpus, arm: Arm, run_dir: Path):
    """The recipe with the user's overrides, then the fields the bench sets: corpus, base, run, seed,
    precision and threads."""
    from neoembed.adapt import AdaptSettings
    from neoembed.packaged import resolve_recipe
    from neoembed.recipes import field_path, load_recipe, parse_overrides

    overrides = parse_overrides([f"--{item}" for item in bench.overrides])
    fixed = {
        field_path(AdaptSettings, select): value
        for select, value in (
            (lambda s: s.corpus.path, str(corpus.file)),
            (lambda s: s.corpus.eval_texts, [str(p) for p in corpus.eval_texts]),
            (lambda s: s.model.base, bench.model),
            (lambda s: s.train.output_dir, str(run_dir)),
            (lambda s: s.train.seed, arm.seed),
            (lambda s: s.train.precision, arm.precision),
            (lambda s: s.train.threads, bench.threads),
        )
    }
    return load_recipe(resolve_recipe(bench.recipe), AdaptSettings, {**overrides, **fixed})


def run_adaptation(settings) -> Adapted:
    from neoembed.adapt import run_adapt
    from neoembed.training import logged_runtime

    started = time.perf_counter()
    result = run_adapt(settings)
    minutes = (time.perf_counter() - started) / 60
    runtime = logged_runtime(read_jsonl(Path(settings.train.output_dir) / "train" / METRICS_FILE))
    training = result.training
    return Adapted(training.steps, runtime / 60, str(training.export), minutes=minutes,
                   base_weight=training.base_weight, documents=result.prepared.corpus.train,
                   pairs=result.prepared.pairs)  # fmt: skip


def train_arm(bench: AdaptBench, corpora: dict[str, Corpus], arm: Arm, runs: dict[Arm, Trained]) -> Trained:
    """The adaptation, or a baseline of the adaptation trained before it on the same corpus, seed and
    precision: plain ST on its pairs for as many steps, TSDAE on its documents for as many minutes as its
    training took."""
    from neoembed.adapt import PAIRS

    corpus, run_dir = corpora[arm.corpus], bench.out / arm.name
    same = (arm.corpus, arm.precision, arm.seed)
    ours = next((a for a in runs if a.method == "adapt" and (a.corpus, a.precision, a.seed) == same), arm)
    settings = adapt_settings(bench, corpus, ours, bench.out / ours.name)
    size = corpus.file.stat().st_size
    adapt_identity = {"recipe": recipe_identity(settings.model_dump(mode="json")), "corpus": size}
    if arm.method == "adapt":
        return reuse_or_train(run_dir, adapt_identity, bench.fresh, lambda: run_adaptation(settings), Adapted)
    adapted, max_length, export = runs[ours], settings.model.max_length, run_dir / "model"
    if arm.method == "st":
        budget = Budget(adapted.steps, None, arm.seed, arm.precision)
        pairs = bench.out / ours.name / PAIRS
        mnrl = [st_baseline.LEARNING_RATE, st_baseline.BATCH_SIZE]
        identity: dict[str, object] = {"pairs": adapt_identity, "settings": mnrl}

        def train() -> Trained:
            return st_baseline.train(bench.model, pairs, run_dir, export, budget, max_length)

    else:
        budget = Budget(None, adapted.train_minutes, arm.seed, arm.precision)
        tsdae = [st_baseline.TSDAE_LEARNING_RATE, st_baseline.TSDAE_BATCH_SIZE, st_baseline.DELETE_RATIO]
        identity = {"corpus": size, "settings": tsdae}

        def train() -> Trained:  # the documents are read only when TSDAE trains: a reused run needs none
            documents = settings.corpus.read(evaluated_texts(settings.eval.sets)).train
            return st_baseline.train_tsdae(bench.model, documents, run_dir, export, budget, max_length)

    identity |= {"base": bench.model, "budget": asdict(budget), "threads": bench.threads}
    return reuse_or_train(run_dir, identity, bench.fresh, train)


def run(bench: AdaptBench) -> WrittenReport:
    import torch

    torch.set_num_threads(bench.threads)
    written = write_corpora(bench.out / "corpora", bench.corpora, bench.packages)
    corpora: dict[str, Corpus] = {corpus.name: corpus for corpus in written}
    base = f"{Path(bench.model).name} (base)"
    methods = ["adapt", *(name for name in ("st", "tsdae") if name in bench.baselines)]
    grid = product(corpora, bench.run_precisions(), range(bench.seeds), methods)
    arms = [
        Arm(method, precision, seed, f"{METHODS[method]} on {corpus}, {precision} seed {seed}", base, corpus)
        for corpus, precision, seed, method in grid
    ]
    fixed = {base: bench.model, "BM25": "bm25"}
    runs, seeded = train_and_score(
        arms, lambda arm, runs: train_arm(bench, corpora, arm, runs), fixed, COLUMNS, 256, bench.out
    )
    return write_report(report(bench, list(corpora.values()), runs, seeded, base), bench.out)


def report(
    bench: AdaptBench, corpora: list[Corpus], runs: dict[Arm, Trained], seeded: SeedAverages, base_row: str
) -> Report:
    """Per corpus and precision the base, BM25 and each method's seed means, their paired differences and the
    targets; then every run."""
    tables, verdicts = Tables("adapt", "corpus", seeded), []
    for precision in bench.run_precisions():
        gains = []
        for corpus in corpora:
            arms = [arm for arm in runs if arm.corpus == corpus.name and arm.precision == precision]
            group = Group({"corpus": corpus.name}, arms, base_row, METHODS, COMPARISONS, precision)
            tables.add(
                group, [run_row(label, seeded, None, {"corpus": corpus.name}) for label in (base_row, "BM25")]
            )
            gains.append(mean_gain(corpus, group, seeded))
            verdicts += [check.line() for check in goal_checks(corpus, group, seeded, runs, gains[-1])]
        if len(corpora) > 1:
            mean = sum(gains) / len(gains)
            each = ", ".join(
                f"{corpus.name} {gain:+.2%}" for corpus, gain in zip(corpora, gains, strict=True)
            )
            target = f"all corpora ({precision}): mean held-out gain >= {MEAN_GAIN:+.0%}"
            verdicts.append(Check(target, mean >= MEAN_GAIN, f"{mean:+.2%} ({each})").line())
    per_run = [run_row(label, seeded, None) for label in (base_row, "BM25")]
    per_run += [run_row(arm.label, seeded, trained) for arm, trained in runs.items()]
    # The baselines' settings as their modules define them (the runs' identities carry the same constants).
    st = st_baseline
    baselines = {
        "st": f"{METHODS['st']}: MultipleNegativesRankingLoss with the library's trainer (lr {st.LEARNING_RATE:g}, "
        f"batch {st.BATCH_SIZE}) on the adaptation's own pairs for as many steps, no selection split or WiSE-FT",
        "tsdae": f"{METHODS['tsdae']}: DenoisingAutoEncoderLoss (tied decoder, {st.DELETE_RATIO:.0%} of words "
        f"deleted, lr {st.TSDAE_LEARNING_RATE:g}, batch {st.TSDAE_BATCH_SIZE}, constant schedule) on the same "
        "documents for the minutes the adaptation's training took",
    }
    setup = [
        f"{bench.seeds} seed{'s' if bench.seeds > 1 else ''} in {', '.join(bench.run_precisions())} on "
        f"{bench.threads} CPU thread(s)",
        f"neoembed adapt: the {bench.recipe} recipe",
        *(baselines[name] for name in bench.baselines),
    ]
    notes = (
        "; ".join(setup) + ". nDCG@10: mean over seeds (relative change vs the base) [lowest, highest seed]."
    )
    per_run_columns = ["model", *COLUMNS.values(), "steps", "train minutes", "adapt minutes"]
    runs_by_name = {arm.name: trained for arm, trained in runs.items()}
    return tables.report(
        notes, "the queries", Table(per_run, per_run_columns), verdicts, False, runs=runs_by_name, bench=bench
    )


def run_row(
    label: str, seeded: SeedAverages, trained: Trained | None, cells: dict[str, str] | None = None
) -> Row:
    """`label`'s scores (under `cells`, where given), and a run's steps and minutes."""
    figures: dict = {column: seeded.scores[label].get(task) for task, column in COLUMNS.items()}
    if trained is not None:
        figures |= {"steps": trained.steps, "train minutes": round(trained.train_minutes, 1)}
    if isinstance(trained, Adapted):
        figures["adapt minutes"] = round(trained.minutes, 1)
    return Row({**(cells or {}), "model": label}, figures)


def gain(seeded: SeedAverages, label: str, base_row: str, task: str) -> float:
    """`label`'s relative change over the base on `task`."""
    change = relative(seeded.scores[label][task], seeded.scores[base_row][task])
    if change is None:
        raise RunError(f"{label} or the base has no {task} score (see mteb/mteb_eval.jsonl)")
    return change


def mean_gain(corpus: Corpus, group: Group, seeded: SeedAverages) -> float:
    """The adaptations' mean relative change over the base on the corpus's own held-out task."""
    adapted = [arm.label for arm in group.arms if arm.method == "adapt"]
    return sum(gain(seeded, label, group.base_row, corpus.task) for label in adapted) / len(adapted)


def goal_checks(
    corpus: Corpus, group: Group, seeded: SeedAverages, runs: dict[Arm, Trained], mean: float
) -> list[Check]:
    """The targets for one corpus in one precision (`mean`: its `mean_gain`)."""
    adapted = [arm for arm in group.arms if arm.method == "adapt"]
    where = f"{corpus.name} ({group.precision})"

    def versus(method: str | None):
        return seeded.compare(group.labels("adapt"), group.labels(method)).get(corpus.task)

    checks = [
        Check(
            f"{where}: held-out retrieval >= {GAIN:+.0%} over the base, interval above 0",
            mean >= GAIN and above_zero(versus(None)),
            f"mean {mean:+.2%}, {difference_cell(versus(None))} points",
        )
    ]
    for method in ("st", "tsdae"):
        ahead = f"{where}: ahead of {METHODS[method]}, interval above 0"
        if method in group.run_methods():
            difference = versus(method)
            checks.append(Check(ahead, above_zero(difference), f"{difference_cell(difference)} points"))
        else:
            checks.append(Check(ahead, None, f"not measured (--baselines left {METHODS[method]} out)"))
    for task in FORGETTING:
        worst = min(gain(seeded, arm.label, group.base_row, task) for arm in adapted)
        target = f"{where}: {COLUMNS[task]} within {FORGET:.1%} of the base in every seed"
        checks.append(Check(target, worst >= -FORGET, f"worst {worst:+.2%}"))
    # `train_arm` trains or reuses every adapt arm as an `Adapted`
    adaptations = [adaptation for arm in adapted if isinstance(adaptation := runs[arm], Adapted)]
    longest = max(adaptation.minutes for adaptation in adaptations)
    target = f"{where}: adaptation under {MINUTES:g} minutes on {adaptations[0].documents:,} documents"
    figures = f"longest {longest:.1f} minutes (pairs, training, selection, export)"
    return [*checks, Check(target, longest < MINUTES, figures)]
