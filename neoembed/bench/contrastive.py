"""`neoembed bench contrastive`: fine-tune the packaged MiniLM on the WordNet training pairs for a CPU time
budget and score it before/after on the held-out WordNet retrieval tasks next to BM25.

Tasks (held-out synsets only, so nothing scored was trained on): example sentence -> definition (the target
task: +25% relative nDCG@10) and the MTEB engineer's lemma -> definition task. Every model runs through the
same mteb harness (`neoembed.evaluation.runner`). With `--neobert DIR` the small pretrained NeoBERT goes
through the same recipe and gets its rows too.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import torch

from neoembed.bench.report import markdown_table, write_report
from neoembed.packaged import manifests_dir, recipes_dir

TARGET = 0.25
EXAMPLE_TASK = "WordNetExampleDefinitionRetrieval"
LEMMA_TASK = "WordNetDefinitionRetrieval"


def wordnet_build(out: Path, rows: int, pairs: list[str], mine: bool) -> Path:
    """The embedded WordNet training pairs of the given kinds (the builder resumes and reuses a finished build).

    The default is the example -> gloss pairs without mined negatives: the kind the target task scores, and the
    cheapest per step, so a CPU budget buys the most steps."""
    import yaml

    from neoembed.data.build import BuildConfig, build

    if not (out / "stats.json").exists():
        manifests = out.parent / "manifests"
        manifests.mkdir(parents=True, exist_ok=True)
        manifest = yaml.safe_load((manifests_dir() / "wordnet.yaml").read_text())
        manifest.setdefault("options", {})["wordnet_pairs"] = pairs
        (manifests / "wordnet.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        build(BuildConfig(manifests=manifests, out=out, sources=("wordnet",), max_rows=rows, mine=mine))
    return out


def fine_tune(base: str, data: Path, out: Path, minutes: float, overrides: dict) -> dict:
    from neoembed.contrastive.settings import ContrastiveSettings
    from neoembed.contrastive.train import run_contrastive
    from neoembed.recipes import load_recipe

    settings = load_recipe(
        recipes_dir() / "contrastive-cpu.yaml",
        ContrastiveSettings,
        {
            "data.path": str(data),
            "model.base": base,
            "train.output_dir": str(out),
            "train.max_minutes": minutes,
            "export.path": str(out / "neobert-embed"),
            **overrides,
        },
    )
    started = time.perf_counter()
    summary = run_contrastive(settings)
    return {**summary, "wall_minutes": (time.perf_counter() - started) / 60}


def run(
    data: Path | None,
    rows: int,
    pairs: list[str],
    mine: bool,
    minutes: float,
    overrides: dict,
    threads: int,
    neobert: str | None,
    out_dir: Path,
    fresh: bool = False,
) -> dict:
    from neoembed.evaluation.local_tasks import WordNetDefinitionRetrieval, WordNetExampleDefinitionRetrieval
    from neoembed.evaluation.models import EvalSettings
    from neoembed.evaluation.runner import resolve_models, run_evaluation

    torch.set_num_threads(threads)
    overrides = {"train.threads": threads, **overrides}
    data = data or wordnet_build(out_dir / "data", rows, pairs, mine)
    bases = {"minilm": "minilm", **({"neobert": neobert} if neobert else {})}
    runs = {}
    for label, base in bases.items():
        run_dir = out_dir / f"train-{label}"
        if fresh and run_dir.exists():
            shutil.rmtree(run_dir)
        runs[label] = fine_tune(base, data, run_dir, minutes, overrides)

    names = ["bm25", *bases.values(), *(r["export"] for r in runs.values())]
    labels = ["BM25", *(f"{label} (base)" for label in bases), *(f"{label} fine-tuned" for label in runs)]
    settings = EvalSettings(max_length=128)
    specs = resolve_models(names, settings)
    report = run_evaluation(
        specs, [WordNetExampleDefinitionRetrieval(), WordNetDefinitionRetrieval()], settings, out_dir / "mteb"
    )
    scores = report.summary.scores
    table = []
    for label, spec in zip(labels, specs, strict=True):
        key = label.split(" ")[0]
        trained = runs.get(key) if "fine-tuned" in label else None
        table.append(
            {
                "model": label,
                "example->definition nDCG@10": scores[spec.label].get(EXAMPLE_TASK),
                "lemma->definition nDCG@10": scores[spec.label].get(LEMMA_TASK),
                "steps": trained["steps"] if trained else "",
                "train minutes": round(trained["wall_minutes"], 1) if trained else "",
            }
        )
    base_score = table[1]["example->definition nDCG@10"]
    tuned_score = table[len(bases) + 1]["example->definition nDCG@10"]
    gain = tuned_score / base_score - 1 if base_score and tuned_score is not None else None
    columns = list(table[0])
    summary = (
        f"MiniLM example->definition nDCG@10: {base_score:.4f} -> {tuned_score:.4f} "
        f"({gain:+.1%} relative; target +{TARGET:.0%}: {'met' if gain >= TARGET else 'NOT met'})"
        if gain is not None
        else "the MiniLM scores are missing: see the mteb log under the output directory"
    )
    markdown = markdown_table(table, columns) + "\n\n" + summary
    json_path, md_path = write_report(
        out_dir,
        "contrastive",
        {"rows": table, "gain": gain, "target": TARGET, "runs": runs, "data": str(data), "threads": threads},
        markdown,
    )
    return {
        "table": markdown_table(table, columns),
        "summary": summary,
        "json": json_path,
        "markdown": md_path,
    }
