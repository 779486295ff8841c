"""summary.md of a quickstart run: what each step made, its commands and time, and the comparison table."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from neoembed.contrastive import relative_change
from neoembed.quickstart.steps import Finished
from neoembed.training import CURVES_FILE


def format_searches(searches: list[dict], shown: int = 3) -> str:
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


def _fine_tuning_table(results: dict[str, Finished]) -> list[str]:
    lines = [
        "| model | base | steps | held-out set | nDCG@10 before | nDCG@10 after | change "
        "| recall@10 before | recall@10 after |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, base in (("neobert-embed", "neobert-pretrained"), ("minilm-embed", "all-MiniLM-L6-v2")):
        run = results[name].result
        for heldout, after in run.eval_after.items():
            before = run.eval_before[heldout]
            change = relative_change(before["ndcg@10"], after["ndcg@10"])
            lines.append(
                f"| {name} | {base} | {run.steps} | {heldout} | {before['ndcg@10']:.3f} "
                f"| {after['ndcg@10']:.3f} | {'-' if change is None else f'{change:+.1%}'} "
                f"| {before['recall@10']:.3f} | {after['recall@10']:.3f} |"
            )
    return lines


def serve_command(run_dir: Path, manifest: dict) -> str:
    """The command that serves the quickstart's index with the model that built it, search page at /."""
    return f"neoembed serve --model {manifest['model']} --index {run_dir / 'index'}"


def _sections(results: dict[str, Finished], run_dir: Path) -> list[tuple[str, list[str]]]:
    data, pretrain, index = results["data"].result, results["pretrain"].result, results["index"].result
    manifest, tuning = index.manifest, index.manifest["tuning"]
    losses = ", ".join(f"step {step}: {loss}" for step, loss in pretrain.heldout_loss)
    return [
        (
            "data",
            [
                f"{data.rows_out:,} WordNet training pairs from {data.rows_read:,} read, "
                f"{data.negatives_per_row} mined hard negatives per row: `data/` (see `data/stats.md`).",
            ],
        ),
        (
            "pretrain",
            [
                f"Held-out MLM loss ({losses}); the model is `neobert-pretrained/`. "
                f"Curves: {_curves_link('pretrain')}."
            ],
        ),
        (
            "neobert-embed",
            [
                "Both fine-tuned from the `contrastive-cpu` recipe (the NeoBERT with a larger step and batch, "
                "distilling all-MiniLM-L6-v2; MiniLM distilling its own base scores, the same cached outputs); "
                "scored before and after on "
                "held-out WordNet example sentence -> definition retrieval and on FOLDOC term -> definition, "
                "a source the training data never came from:",
                "",
                *_fine_tuning_table(results),
                "",
                "Curves: "
                + ", ".join(_curves_link(f"contrastive/{name}") for name in ("neobert-embed", "minilm-embed"))
                + ".",
            ],
        ),
        ("minilm-embed", ["See the table above; the export is `minilm-embed/`."]),
        (
            "evaluate",
            [
                "`neoembed mteb-eval` on the held-out WordNet tasks and FOLDOC (main score x 100; files in "
                "`mteb/`):",
                "",
                results["evaluate"].result.table,
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
