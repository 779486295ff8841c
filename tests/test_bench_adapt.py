"""`neoembed bench adapt` end to end on a tiny model: the three corpora written as a user would hand them over,
per seed the adaptation, plain ST on its pairs and steps, and TSDAE on its documents and minutes, one mteb
run, the report and its targets, reuse, and a run without the TSDAE baseline."""

import json

import pytest
from test_contrastive import tiny_encoder_dir
from typer.testing import CliRunner


@pytest.mark.slow
def test_the_bench_adapts_and_reports_every_target(tmp_path, minilm_path):
    from neoembed.cli import app

    base, out = tiny_encoder_dir(tmp_path, minilm_path), tmp_path / "bench"
    args = ["bench", "adapt", "--model", str(base), "--packages", "300", "--seeds", "2", "--precisions", "fp32",
            "--threads", "1", "--out", str(out), "--set", "train.max_steps=2", "--set", "train.batch_size=8",
            "--set", "train.log_steps=1", "--set", "train.save_steps=2", "--set", "corpus.selection=40",
            "--set", "model.max_length=32", "--set", "export.selection.general=[]"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "adapt.json").read_text())

    runs = report["runs"]
    names = [
        f"{c}-{m}-fp32-seed{s}"
        for c in ("foldoc", "packages", "jargon")
        for s in (0, 1)
        for m in ("adapt", "st", "tsdae")
    ]
    assert sorted(runs) == sorted(names)
    for name in names:
        assert (out / name / "model" / "modules.json").is_file()
    adapted = runs["packages-adapt-fp32-seed0"]
    assert (
        adapted["steps"] == 2
        and adapted["documents"] > 200
        and set(adapted["pairs"]) == {"crop", "lead", "terms"}
    )
    # the documents the packages evaluation searches are in its corpus; its 500 queries are guarded
    corpus = (out / "corpora" / "packages.jsonl").read_text().splitlines()
    assert (
        len(corpus) == 300 and len((out / "corpora" / "packages-queries.txt").read_text().splitlines()) == 500
    )
    # the Jargon File's definitions likewise (its 300 held-out terms are guarded by adapt itself)
    assert not (out / "corpora" / "jargon-queries.txt").exists()
    # every model scored on every corpus's task and WordNet's, the targets said per corpus
    tasks = {"FOLDOCDefinitionRetrieval", "PackageDescriptionRetrieval", "JargonDefinitionRetrieval"}
    assert tasks <= set(report["scores"]["BM25"])
    verdicts = report["verdicts"]
    assert len(verdicts) == 3 * 6 + 1 and all(v.endswith(("met", "NOT met")) for v in verdicts)
    assert any("ahead of ST TSDAE" in v for v in verdicts) and any("ahead of ST MNRL" in v for v in verdicts)
    assert verdicts[-1].startswith("all corpora (fp32): mean held-out gain >= +5%: ")
    markdown = (out / "adapt.md").read_text()
    assert "neoembed adapt - base" in markdown and "ST TSDAE" in markdown
    assert "neoembed adapt - ST MNRL" in markdown  # the library on the same pairs, seeds and steps
    assert runs["foldoc-st-fp32-seed1"]["steps"] == runs["foldoc-adapt-fp32-seed1"]["steps"] == 2

    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    rerun = json.loads((out / "adapt.json").read_text())
    assert all(run["reused"] for run in rerun["runs"].values())
    assert rerun["scores"] == report["scores"]

    # --baselines st: TSDAE is neither trained nor reported, and its target says it was not measured
    only_st = CliRunner().invoke(app, [*args, "--baselines", "st"])
    assert only_st.exit_code == 0, only_st.output
    partial = json.loads((out / "adapt.json").read_text())
    assert sorted(partial["runs"]) == sorted(n for n in names if "-tsdae-" not in n)
    table_rows = [line for line in (out / "adapt.md").read_text().splitlines() if line.startswith("|")]
    assert table_rows and not any("TSDAE" in line for line in table_rows)
    assert sum("not measured (--baselines left ST TSDAE out)" in v for v in partial["verdicts"]) == 3
