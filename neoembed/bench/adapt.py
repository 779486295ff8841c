"""`neoembed bench adapt`: `neoembed adapt` on two corpora of another kind than its base model's training data,
against the base model, plain sentence-transformers TSDAE on the same documents and CPU minutes, and BM25,
over several seeds, with paired intervals.

- FOLDOC: the definitions of every FOLDOC entry as the user's documents (no term: no term -> definition pair
  can enter training; the leakage guard leaves out the held-out set's 1,500 definitions), scored on FOLDOC
  term -> definition retrieval of the held-out terms.
- Debian package descriptions: `packages` documents from after the held-out prefix of the fixed sample order
  (the held-out set's synopses and descriptions are handed to the guard as evaluation texts as well), scored
  on synopsis -> description retrieval of the held-out packages.
- Forgetting: WordNet's held-out example -> definition and lemma -> definition, for every adapted model.
Each adapted model is compared with the base and with TSDAE given the same corpus, seed and the minutes the
adaptation's training took; one run is an anecdote: results are seed means with their spread, comparisons
paired bootstraps over the queries of the seed-averaged scores (`significance.mean_of`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from neoembed.bench.contrastive import LEMMA_TASK, difference_cell, reuse_or_train
from neoembed.bench.report import Report, Table, WrittenReport, write_report
from neoembed.bench.settings import AdaptBench
from neoembed.run_files import write_text

FOLDOC_TASK = "FOLDOCDefinitionRetrieval"
PACKAGES_TASK = "PackageDescriptionRetrieval"
EXAMPLE_TASK = "WordNetExampleDefinitionRetrieval"
FORGETTING = (EXAMPLE_TASK, LEMMA_TASK)
COLUMNS = {
    FOLDOC_TASK: "FOLDOC term->definition",
    PACKAGES_TASK: "package synopsis->description",
    EXAMPLE_TASK: "WordNet example->definition",
    LEMMA_TASK: "WordNet lemma->definition",
}
GAIN = 0.03  # the corpus's own held-out retrieval: mean relative gain over the base
FORGET = 0.005  # WordNet: no seed more than this below the base
MINUTES = 10.0  # the adaptation itself on the 10,000-document corpus
METHODS = {"adapt": "neoembed adapt", "tsdae": "ST TSDAE"}


@dataclass(frozen=True)
class Corpus:
    name: str
    task: str  # its held-out retrieval task


CORPORA = (Corpus("foldoc", FOLDOC_TASK), Corpus("packages", PACKAGES_TASK))


@dataclass(frozen=True)
class Arm:
    corpus: str
    method: str
    seed: int
    precision: str

    @property
    def name(self) -> str:
        return f"{self.corpus}-{self.method}-{self.precision}-seed{self.seed}"

    @property
    def label(self) -> str:
        return f"{METHODS[self.method]} on {self.corpus}, {self.precision} seed {self.seed}"


def write_corpora(out: Path, packages: int) -> dict[str, tuple[Path, list[Path]]]:
    """Each corpus as the file a user would hand `neoembed adapt`, with its evaluation-text files."""
    from neoembed.data import packages_retrieval
    from neoembed.data.foldoc import load_entries
    from neoembed.data.packages import load_descriptions

    out.mkdir(parents=True, exist_ok=True)
    foldoc = out / "foldoc.txt"
    write_text(foldoc, "\n".join(entry.definition for entry in load_entries()) + "\n")
    heldout = packages_retrieval()
    guarded = out / "packages-heldout.txt"
    write_text(guarded, "\n".join([*heldout[0].values(), *heldout[1].values()]) + "\n")
    documents = load_descriptions()[len(heldout[1]) : len(heldout[1]) + packages]
    described = out / "packages.jsonl"
    write_text(described, "".join(json.dumps({"text": d.description}) + "\n" for d in documents))
    return {"foldoc": (foldoc, []), "packages": (described, [guarded])}


def run(bench: AdaptBench) -> WrittenReport:
    import torch

    from neoembed.adapt import AdaptSettings, read_corpus, run_adapt
    from neoembed.bench import tsdae_baseline
    from neoembed.bench.st_baseline import Budget
    from neoembed.evaluation import (
        LOCAL_TASKS,
        EvalSettings,
        resolve_models,
        run_evaluation,
        saved_row_inputs,
    )
    from neoembed.packaged import resolve_recipe
    from neoembed.recipes import load_recipe, parse_overrides

    torch.set_num_threads(bench.threads)
    out_dir = bench.out
    corpora = write_corpora(out_dir / "corpora", bench.packages)
    recipe = resolve_recipe(bench.recipe)
    overrides = parse_overrides([f"--{item}" for item in bench.overrides])
    precisions = bench.run_precisions()
    runs: dict[str, dict] = {}
    arms: list[Arm] = []
    for corpus in CORPORA:
        path, eval_texts = corpora[corpus.name]
        for precision in precisions:
            for seed in range(bench.seeds):
                adapt_arm, tsdae_arm = (
                    Arm(corpus.name, "adapt", seed, precision),
                    Arm(corpus.name, "tsdae", seed, precision),
                )
                run_dir = out_dir / adapt_arm.name
                settings = load_recipe(
                    recipe,
                    AdaptSettings,
                    {
                        **overrides,
                        "corpus.path": str(path),
                        "corpus.eval_texts": [str(p) for p in eval_texts],
                        "model.base": bench.model,
                        "train.output_dir": str(run_dir),
                        "train.seed": seed,
                        "train.precision": precision,
                        "train.threads": bench.threads,
                    },
                )

                def adapt(settings=settings, run_dir=run_dir) -> dict:
                    started = time.perf_counter()
                    result = run_adapt(settings)
                    minutes = (time.perf_counter() - started) / 60
                    metrics = [
                        json.loads(line)
                        for line in (run_dir / "train" / "metrics.jsonl").read_text().splitlines()
                    ]
                    train_minutes = (
                        next(m["train_runtime"] for m in reversed(metrics) if "train_runtime" in m) / 60
                    )
                    return {"steps": result.training.steps, "minutes": minutes, "train_minutes": train_minutes,
                            "export": result.training.export, "base_weight": result.training.base_weight,
                            "corpus": result.corpus, "pairs": result.pairs}  # fmt: skip

                identity = {
                    "recipe": settings.model_dump(mode="json", exclude={"train": {"output_dir"}}),
                    "corpus": path.stat().st_size,
                }
                runs[adapt_arm.name] = adapted = reuse_or_train(run_dir, identity, bench.fresh, adapt)
                documents = read_corpus(
                    path,
                    field=settings.corpus.field,
                    min_words=settings.corpus.min_words,
                    min_documents=settings.corpus.min_documents,
                    selection=settings.corpus.selection,
                    eval_texts=tuple(eval_texts),
                ).train
                budget = Budget(None, adapted["train_minutes"], seed, precision)
                tsdae_dir = out_dir / tsdae_arm.name
                runs[tsdae_arm.name] = reuse_or_train(
                    tsdae_dir,
                    {
                        "base": bench.model,
                        "corpus": path.stat().st_size,
                        "budget": asdict(budget),
                        "threads": bench.threads,
                        "settings": [
                            tsdae_baseline.LEARNING_RATE,
                            tsdae_baseline.BATCH_SIZE,
                            tsdae_baseline.DELETE_RATIO,
                        ],
                    },  # fmt: skip
                    bench.fresh,
                    lambda d=documents, b=budget, r=tsdae_dir, s=settings: tsdae_baseline.train(
                        bench.model, d, r, r / "model", b, s.model.max_length
                    ),
                )
                arms += [adapt_arm, tsdae_arm]

    base_row = f"{Path(bench.model).name} (base)"
    models = {base_row: bench.model, "BM25": "bm25", **{arm.label: runs[arm.name]["export"] for arm in arms}}
    eval_settings = EvalSettings(max_length=256)
    specs = dict(zip(models, resolve_models(list(models.values()), eval_settings)))
    evaluated = run_evaluation(
        list(specs.values()), [LOCAL_TASKS[t]() for t in COLUMNS], eval_settings, out_dir / "mteb"
    )
    scores = {label: evaluated.summary.scores[spec.label] for label, spec in specs.items()}
    saved = saved_row_inputs(list(specs.values()), evaluated.summary, out_dir / "mteb")
    inputs = {label: saved[spec.label] for label, spec in specs.items()}
    compared = Comparisons(arms, inputs, base_row)

    summary_rows, difference_rows, checks = [], [], []
    for corpus in CORPORA:
        for precision in precisions:
            group = [a for a in arms if a.corpus == corpus.name and a.precision == precision]
            summary_rows += seed_rows(corpus, precision, group, scores, base_row)
            difference_rows += compared.rows(corpus, precision, group)
            checks += goal_checks(corpus, precision, group, scores, base_row, compared, runs)
    per_run = [
        {
            "model": label,
            **{column: f"{scores[label].get(task, float('nan')):.4f}" for task, column in COLUMNS.items()},
            **(
                {"steps": runs[arm.name]["steps"], "train minutes": f"{runs[arm.name]['train_minutes']:.1f}"}
                if (arm := next((a for a in arms if a.label == label), None))
                else {}
            ),
        }  # fmt: skip
        for label in models
    ]
    notes = (
        f"{bench.seeds} seeds in {', '.join(precisions)} on {bench.threads} CPU thread(s); neoembed adapt: the "
        f"{Path(recipe).stem} recipe; ST TSDAE: DenoisingAutoEncoderLoss (tied decoder, 60% of words deleted, lr 3e-5, "
        "batch 8, constant schedule) on the same documents for the minutes the adaptation's training took. Scores "
        "nDCG@10: mean over seeds (relative change vs the base) [lowest, highest seed]."
    )
    report = Report(
        name="adapt",
        title="neoembed bench adapt",
        tables=[
            Table(summary_rows, ["corpus", "model", *COLUMNS.values()], after=[notes]),
            Table(
                difference_rows,
                ["corpus", "comparison", *COLUMNS.values()],
                after=[
                    "Paired differences in points (x 100) of the seed-averaged scores, with the 95% interval of a paired "
                    "bootstrap over the queries; * where the interval excludes 0."
                ],
            ),  # fmt: skip
            Table(per_run, ["model", *COLUMNS.values(), "steps", "train minutes"]),
        ],
        verdicts=[check for check in checks],
        payload={
            "rows": per_run,
            "summary": summary_rows,
            "differences": difference_rows,
            "scores": scores,
            "runs": runs,
            "recipe": str(recipe),
            "overrides": overrides,
            "seeds": bench.seeds,
            "precisions": list(precisions),
            "threads": bench.threads,
        },  # fmt: skip
    )
    return write_report(report, out_dir)


def seed_rows(corpus: Corpus, precision: str, group: list[Arm], scores: dict, base_row: str) -> list[dict]:
    rows = [{"corpus": corpus.name, "model": label, **{c: f"{scores[label][t]:.4f}" for t, c in COLUMNS.items()}}
            for label in (base_row, "BM25")]  # fmt: skip
    for method, name in METHODS.items():
        labels = [a.label for a in group if a.method == method]
        row = {"corpus": corpus.name, "model": f"{name} {precision} x {len(labels)}"}
        for task, column in COLUMNS.items():
            values = [scores[label][task] for label in labels]
            mean, reference = sum(values) / len(values), scores[base_row][task]
            row[column] = f"{mean:.4f} ({mean / reference - 1:+.1%}) [{min(values):.4f}, {max(values):.4f}]"
        rows.append(row)
    return rows


class Comparisons:
    """Paired differences of seed-averaged scores: adapt - base, tsdae - base, adapt - tsdae."""

    PAIRS = (("adapt", None), ("tsdae", None), ("adapt", "tsdae"))

    def __init__(self, arms: list[Arm], inputs: dict, base_row: str) -> None:
        self.arms, self.inputs, self.base_row = arms, inputs, base_row

    def _side(self, group: list[Arm], method: str | None):
        from neoembed.evaluation import mean_of

        labels = [a.label for a in group if a.method == method] if method else [self.base_row]
        return {task: mean_of([self.inputs[label][task] for label in labels]) for task in COLUMNS}

    def compare(self, group: list[Arm], method: str, other: str | None) -> dict:
        from neoembed.evaluation import compare_pair

        ours, theirs = self._side(group, method), self._side(group, other)
        found = compare_pair(method, other or "base", {task: (ours[task], theirs[task]) for task in COLUMNS})
        return {d.row: d for d in found}

    def rows(self, corpus: Corpus, precision: str, group: list[Arm]) -> list[dict]:
        rows = []
        for method, other in self.PAIRS:
            found = self.compare(group, method, other)
            name = f"{METHODS[method]} - {METHODS[other] if other else 'base'} ({precision})"
            rows.append({"corpus": corpus.name, "comparison": name,
                         **{column: difference_cell(found.get(task)) for task, column in COLUMNS.items()}})  # fmt: skip
        return rows


def goal_checks(corpus, precision, group, scores, base_row, compared: Comparisons, runs) -> list[str]:
    """The issue's targets for one corpus and precision, each a sentence saying met or NOT met."""
    adapted = [a for a in group if a.method == "adapt"]
    task = corpus.task
    gains = [scores[a.label][task] / scores[base_row][task] - 1 for a in adapted]
    mean_gain = sum(gains) / len(gains)
    versus_base = compared.compare(group, "adapt", None).get(task)
    versus_tsdae = compared.compare(group, "adapt", "tsdae").get(task)

    def interval(d) -> str:
        return difference_cell(d) + " points"

    def verdict(met: bool) -> str:
        return "met" if met else "NOT met"

    lines = [
        f"{corpus.name} ({precision}): held-out retrieval gain over the base >= {GAIN:+.0%} with the interval above 0: "
        f"mean {mean_gain:+.2%}, {interval(versus_base)}: "
        f"{verdict(mean_gain >= GAIN and versus_base is not None and (versus_base.low or 0) > 0)}",
        f"{corpus.name} ({precision}): ahead of ST TSDAE with the interval above 0: {interval(versus_tsdae)}: "
        f"{verdict(versus_tsdae is not None and (versus_tsdae.low or 0) > 0)}",
    ]
    for forgetting in FORGETTING:
        worst = min(scores[a.label][forgetting] / scores[base_row][forgetting] - 1 for a in adapted)
        lines.append(
            f"{corpus.name} ({precision}): {COLUMNS[forgetting]} within {FORGET:.1%} of the base in every seed: "
            f"worst {worst:+.2%}: {verdict(worst >= -FORGET)}"
        )
    minutes = max(runs[a.name]["minutes"] for a in adapted)
    lines.append(
        f"{corpus.name} ({precision}): adaptation under {MINUTES:g} minutes: longest {minutes:.1f} minutes "
        f"(pairs, training, selection, export) on {runs[adapted[0].name]['corpus']['rows']:,} documents: "
        f"{verdict(minutes < MINUTES)}"
    )
    return lines
