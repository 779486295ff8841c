"""The README's main job at toy sizes: every step through the real commands, the summary, resume, failures."""

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from neoembed.cli import app
from neoembed.quickstart.pipeline import SMOKE, Quickstart
from neoembed.quickstart.steps import CommandFailed, Finished, Ran, Step, StepFailed, run_command, run_steps

runner = CliRunner()
STEPS = [step.name for step in Quickstart(Path("unused"), SMOKE, Console()).steps()]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("quickstart")
    result = runner.invoke(app, ["quickstart", "--smoke", "--run-dir", str(run_dir)])
    assert result.exit_code == 0, result.output
    return run_dir, result.output


def test_every_step_runs_and_the_summary_reports_them(smoke_run):
    run_dir, output = smoke_run
    summary = (run_dir / "summary.md").read_text()
    for number, name in enumerate(STEPS, start=1):
        assert f"## {number}. {name}" in summary
        assert (run_dir / "steps" / f"{name}.json").exists()
    # the comparison table has every model as a column
    header = next(line for line in summary.splitlines() if line.startswith("| Task |"))
    for model in ("neobert-pretrained", "neobert-embed", "all-MiniLM-L6-v2", "minilm-embed", "bm25"):
        assert model in header
    # the searches found held-out example sentences' glosses, and the fresh process loaded neobert-embed
    searches = json.loads((run_dir / "steps" / "index.json").read_text())["result"]["searches"]
    assert len(searches) == 3 and all(s["hits"] for s in searches)
    assert any(s["rank"] == 1 for s in searches)
    assert "dimension: 128" in summary
    assert "$ neoembed build-data" in output  # the commands are shown as a user would type them
    # the command that opens the search page on the WordNet index
    assert f"neoembed serve --model {run_dir / 'minilm-embed'} --index {run_dir / 'index'}" in summary
    # every training run drew its curves, and the summary links each
    for run in ("pretrain", "contrastive/neobert-embed", "contrastive/minilm-embed"):
        assert f"[{run}/curves.png]({run}/curves.png)" in summary
        assert (run_dir / run / "curves.png").stat().st_size > 10_000


def test_a_rerun_skips_every_finished_step(smoke_run):
    run_dir, _ = smoke_run
    again = runner.invoke(app, ["quickstart", "--smoke", "--run-dir", str(run_dir)])
    assert again.exit_code == 0, again.output
    assert again.output.count("done earlier, skipped") == len(STEPS)
    assert "$ neoembed" not in again.output


def test_a_failing_command_reports_its_error_not_its_progress_bar(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: {path: nowhere}\ntrain: {no_such_field: 1}\n")
    with pytest.raises(CommandFailed) as failure:
        run_command(["contrastive", "--recipe", bad], tmp_path / "log.txt", Console())
    assert "no_such_field" in str(failure.value) and "exited with status 2" in str(failure.value)
    assert "no_such_field" in (tmp_path / "log.txt").read_text()


@dataclass
class Value:
    value: int


def test_a_failed_step_is_named_and_finished_steps_are_kept(tmp_path):
    calls = []

    def ok(run_dir):
        calls.append("ok")
        return Ran(Value(1), ["neoembed ok"])

    def broken(run_dir):
        raise RuntimeError("disk full")

    def steps(second):
        return [Step("first", "works", ok, Value), Step("second", "breaks", second, Value)]

    with pytest.raises(StepFailed, match=r"step 2 \(second\) failed: disk full"):
        run_steps(steps(broken), tmp_path, Console())
    results = run_steps(steps(ok), tmp_path, Console())
    assert calls == ["ok", "ok"]  # the first step ran once; the fixed second ran on the re-run
    assert results["first"] == Finished(results["first"].seconds, ["neoembed ok"], Value(1))
    (tmp_path / "steps" / "second.json").write_text('{"seconds": 1, "result": {"value": 2}}')  # another form
    assert run_steps(steps(ok), tmp_path, Console())["second"].result == Value(1) and len(calls) == 3


def test_the_quickstart_table_and_the_local_benchmark_hold_every_local_task():
    from neoembed.evaluation.tasks import select_tasks
    from neoembed.quickstart.pipeline import DEFAULT

    local = [task.metadata.name for task in select_tasks(benchmark="neoembed-local")]
    assert "FOLDOCDefinitionRetrieval" in local  # the cross-source set
    assert sorted(DEFAULT.tasks) == sorted(local)
