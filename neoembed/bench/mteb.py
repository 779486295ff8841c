"""`neoembed bench mteb`: harness overhead of `mteb-eval` on the local WordNet tasks, for MiniLM.

For each local task, ``repeats`` times, alternately: a full ``mteb.evaluate`` of the task (data building,
encoding, scoring; no result cache) that records every ``model.encode`` call it makes, then the same calls
made directly on the same model with the same batch size. The best time of each side is kept. Throughput is
texts per second over the whole call; overhead = harness time / direct time - 1 (target: under 10% over all
tasks). Because the machine is shared, the time spent outside ``model.encode`` within the same harness run
is also reported: it does not depend on load changing between the two sides.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import torch

from neoembed.bench.report import Report, Row, Table, WrittenReport, meets, timed, write_report
from neoembed.bench.settings import MtebBench

TARGET_OVERHEAD = 0.10
COLUMNS = ["task", "texts", "harness_s", "harness_texts_per_s", "direct_s", "direct_texts_per_s", "overhead",
           "in_run_overhead"]  # fmt: skip


@contextmanager
def recording(model) -> Iterator[dict]:
    """`model.encode` (encode_query/encode_document go through it) recording each call's texts and the time
    spent inside it, so a harness run can be replayed as direct calls and split into encode vs the rest."""
    record: dict = {"calls": [], "encode_s": 0.0}
    real_encode = model.encode

    def recording_encode(*args, **kwargs):
        texts = args[0] if args else kwargs.get("inputs", kwargs.get("sentences"))
        record["calls"].append([texts] if isinstance(texts, str) else list(texts))
        start = time.perf_counter()
        try:
            return real_encode(*args, **kwargs)
        finally:
            record["encode_s"] += time.perf_counter() - start

    model.encode = recording_encode
    try:
        yield record
    finally:
        del model.encode  # back to the class method


def overhead_row(task: str, texts: int, harness_s: float, direct_s: float, encode_s: float) -> Row:
    """A task's (or all tasks') texts/s each way, the harness's overhead over direct calls, and the time spent
    outside `model.encode` within the harness run."""
    return Row({"task": task}, {
        "texts": texts, "harness_s": harness_s, "direct_s": direct_s, "harness_texts_per_s": texts / harness_s,
        "direct_texts_per_s": texts / direct_s, "overhead": harness_s / direct_s - 1,
        "encode_in_harness_s": encode_s, "in_run_overhead": harness_s / encode_s - 1,
    })  # fmt: skip


def measure(bench: MtebBench) -> tuple[list[Row], dict[str, float]]:
    """Each local task's row, best of `bench.repeats` each way, the two sides alternated so that load
    changes on a shared machine hit both; and the 1-minute load average before and after."""
    from neoembed.mteb_setup import mteb

    from neoembed.evaluation import LOCAL_TASKS, EvalSettings, heldout_synsets, load_model, resolve_model

    settings = EvalSettings(batch_size=bench.batch_size)
    wrapper = load_model(resolve_model(bench.model, settings), settings)
    heldout_synsets()  # read WordNet once, as any run after the first task does
    load_before = os.getloadavg()[0]
    options = dict(
        encode_kwargs=settings.encode_kwargs(), cache=None, show_progress_bar=False, co2_tracker=False
    )

    def direct(calls: list[list[str]]) -> None:  # the harness's calls, same texts and batch size, without it
        for call in calls:
            wrapper.model.encode(call, batch_size=bench.batch_size, show_progress_bar=False)

    def harness(task_class: type) -> None:  # one run of the task through mteb
        mteb.evaluate(wrapper, task_class(), **options)

    rows = []
    for name, task_class in LOCAL_TASKS.items():
        harness_s = direct_s = float("inf")
        for _ in range(bench.repeats):
            with recording(wrapper.model) as record:
                elapsed = timed(partial(harness, task_class))
            if elapsed < harness_s:
                harness_s, encode_s = elapsed, record["encode_s"]
            direct_s = min(direct_s, timed(partial(direct, record["calls"])))
        rows.append(overhead_row(name, sum(map(len, record["calls"])), harness_s, direct_s, encode_s))
    return rows, {"before": load_before, "after": os.getloadavg()[0]}


def run(bench: MtebBench) -> WrittenReport:
    torch.set_num_threads(bench.threads)
    rows, load = measure(bench)
    texts = sum(int(row.number("texts")) for row in rows)
    summed = (sum(row.number(f) for row in rows) for f in ("harness_s", "direct_s", "encode_in_harness_s"))
    rows.append(total := overhead_row("all local tasks", texts, *summed))
    overhead, in_run_overhead = total.number("overhead"), total.number("in_run_overhead")
    verdict = (
        f"harness overhead over all local tasks: {100 * overhead:.1f}% vs direct encode "
        f"({meets(overhead < TARGET_OVERHEAD)} the <{100 * TARGET_OVERHEAD:.0f}% target); time "
        f"outside model.encode within the same harness runs: {100 * in_run_overhead:.1f}%; model "
        f"{bench.model}, batch {bench.batch_size}, best of {bench.repeats}, {bench.threads} threads, 1-min load "
        f"average {load['before']:.1f} -> {load['after']:.1f}"
    )
    settings = {"model": bench.model, "batch_size": bench.batch_size, "repeats": bench.repeats}
    payload = {**settings, "load_average": load, "rows": rows, "target_overhead": TARGET_OVERHEAD}
    return write_report(
        Report("mteb", "bench mteb", payload, [Table(rows, COLUMNS)], verdicts=[verdict]), bench.out
    )
