"""summary.md of a quickstart run: what each step made, its commands and time, and the comparison table."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from neoembed.embedder import MINILM_ALIASES
from neoembed.quickstart.examples import SearchedQuery
from neoembed.quickstart.steps import Finished
from neoembed.training import CURVES_FILE, recorded_recipe
from neoembed.workflow import MINILM_RECIPE, NEOBERT_RECIPE


def format_searches(searches: list[SearchedQuery], shown: int = 3) -> str:
    """Each query with its top hits; the expected gloss (the query's own synset) is marked with `<=`."""
    lines = []
    for search in searches:
        rank = search["rank"]
        found = (
            f"expected gloss at rank {rank}"
            if rank
            else f"expected gloss not in the top {len(search['hits'])}"
        )
        lines.append(f'query: "{search["query"]}" ({found})')
        for hit in search["hits"][:shown]:
            mark = "  <=" if hit["id"] == search["expected"] else ""
            lines.append(f"  {hit['rank']}. {hit['score']:.3f}  {hit['text'][:100]}{mark}")
    return "\n".join(lines)


def _curves_link(run: str) -> str:
    """A markdown link to a training run's curves.png (loss, learning rate, gradient norm, held-out metric)."""
    return f"[{run}/{CURVES_FILE}]({run}/{CURVES_FILE})"


# The fine-tuned columns of the table, each beside its base.
# Each fine-tuned column: its name, its base column, the packaged recipe that trained it.
FINE_TUNED = (
    ("neobert-embed", "neobert-pretrained", NEOBERT_RECIPE),
    ("minilm-embed", "all-MiniLM-L6-v2", MINILM_RECIPE),
)


def describe_fine_tune(run_dir: Path, name: str, base: str, recipe_name: str) -> str:
    """One line for a fine-tuned column: its base, recipe, the settings that shape it and the build it trained on,
    read from what the run recorded (its recipe.json) and the build's stats.json."""
    recipe = recorded_recipe(run_dir / "contrastive" / name)
    built = json.loads((run_dir / "data" / "stats.json").read_text())["sources"]
    distill = recipe["loss"]["distill"]
    teacher = distill and ("its own base" if distill["teacher"] == "base" else _label(distill["teacher"]))
    train, data = recipe["train"], recipe["data"]
    sources = data["sources"] or list(built)
    pairs = _pairs({source: built[source]["rows_out"] for source in sources})
    return (
        f"`{name}`: {base} fine-tuned by the `{recipe_name}` recipe, InfoNCE"
        + (
            f" + distillation of {teacher}'s in-batch scores (weight {distill['weight']:g})"
            if teacher
            else ""
        )
        + f", lr {recipe['optim']['lr']:g}, {train['max_steps']} steps of {train['batch_size']}"
        + (
            f", exported with base weight {recipe['export']['base_weight']}"
            if recipe["export"]["base_weight"]
            else ""
        )
        + f", on `data/`: {pairs} pairs."
    )


def _label(model: str) -> str:
    """The name a model has in the tables: the packaged MiniLM by its own name, a directory by its last part."""
    return "all-MiniLM-L6-v2" if model in MINILM_ALIASES else Path(model).name


def serve_command(run_dir: Path, manifest: dict) -> str:
    """The command that serves the quickstart's index with the model that built it, search page at /."""
    return f"neoembed serve --model {manifest['model']} --index {run_dir / 'index'}"


def _pairs(rows: dict[str, int]) -> str:
    return " + ".join(f"{source} {count:,}" for source, count in rows.items())


def _sections(results: dict[str, Finished], run_dir: Path) -> list[tuple[str, list[str]]]:
    data, pretrain, index = results["data"].result, results["pretrain"].result, results["index"].result
    manifest, tuning = index.manifest, index.manifest["tuning"]
    losses = ", ".join(f"step {step}: {loss}" for step, loss in pretrain.heldout_loss)
    return [
        (
            "data",
            [
                f"{data.rows_out:,} training pairs ({_pairs(data.sources)}) from {data.rows_read:,} read: "
                "`data/` (see `data/stats.md`). No hard negatives are mined here, as the recipe trains on the "
                "pairs alone; `neoembed build-data` mines them by default.",
            ],
        ),
        (
            "pretrain",
            [
                f"Held-out MLM loss ({losses}); the model is `neobert-pretrained/`. "
                f"Curves: {_curves_link('pretrain')}."
            ],
        ),
        *(
            (
                name,
                [
                    f"The export is `{name}/`; step 5 scores it beside {base}. Curves: "
                    f"{_curves_link(f'contrastive/{name}')}."
                ],
            )
            for name, base, _ in FINE_TUNED
        ),
        (
            "evaluate",
            [
                "`neoembed mteb-eval` on the held-out WordNet tasks and FOLDOC, a source no training text came "
                "from (main score x 100; files in `mteb/`):",
                "",
                results["evaluate"].result.table,
                "",
                *(
                    f"- {describe_fine_tune(run_dir, name, base, recipe)}"
                    for name, base, recipe in FINE_TUNED
                ),
            ],
        ),
        (
            "index",
            [
                f"{manifest['ntotal']:,} documents, FAISS `{manifest['factory']}` ({manifest['factory_reason']}); "
                f"recall@10 {tuning['recall_at_10']:.3f} against exact search, "
                f"{tuning['qps_batch']:,.0f} queries/s batched on {tuning['threads']} threads. "
                "Held-out example sentences searched:",
                "",
                "```",
                format_searches(index.searches),
                "```",
                "",
                "Search it in a browser: run the command below, then open http://127.0.0.1:8000/ "
                "(type a query; the hits come with their scores, the model, index type and latency).",
                "",
                "```",
                serve_command(run_dir, manifest),
                "```",
            ],
        ),
        (
            "load",
            [
                f"`{Path(results['load'].result.script).name}`, run with `python` in the run directory:",
                "",
                "```",
                results["load"].result.output,
                "```",
            ],
        ),
    ]


def write_summary(run_dir: Path, results: dict[str, Finished], console: Console) -> Path:
    """Write summary.md under `run_dir`, print it, and return its path."""
    minutes = sum(record.seconds for record in results.values()) / 60
    lines = [
        "# neoembed quickstart",
        "",
        f"Run directory `{run_dir}`; the steps took {minutes:.1f} min in all (re-runs skip finished steps).",
        "",
    ]
    for number, (name, body) in enumerate(_sections(results, run_dir), start=1):
        record = results[name]
        lines += [f"## {number}. {name} ({record.seconds:.0f} s)", ""]
        lines += ["```", *record.commands, "```", ""] if record.commands else []
        lines += [*body, ""]
    summary = run_dir / "summary.md"
    summary.write_text("\n".join(lines))
    console.rule("summary")
    console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)
    return summary
