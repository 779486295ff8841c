"""The batcher's token budget: --max-batch-tokens where given, else about the batch size at which the model
embeds fastest on this device, so that batching across requests runs at `model.encode`'s best batch.

On the CPU the budget is a measured constant (`settings.CPU_BATCH_TOKENS`): throughput there peaks at
small batches, whose activations stay in the caches, and a sweep timed at start-up on a few shared cores would
cost seconds and pick by noise. On a GPU the best batch grows with the device and shrinks with the model (on
an H200 the quickstart's 4 x 128 NeoBERT embedded 2.5x faster at batch 256 than at 32; a 250M one fills the
device with far fewer inputs), so it is measured: a batch of MEASURE_LENGTH-token inputs at each candidate
budget, sent through the inference process as serving sends it (the hand-off included), each twice with the
first call discarded (a new shape's first call sets up its kernels, and a compiled model compiles there, which
can take minutes). The sweep is therefore the warm-up's first step, run once the port is bound, so /health can
say what the server is doing (state.py); until it has chosen, batches use `provisional_budget`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from neoembed.serve.settings import CPU_BATCH_TOKENS, ServeSettings
from neoembed.serve.worker import ModelInfo

MEASURE_LENGTH = 64  # tokens per input of the timed batches: a short passage or a long query
GPU_BUDGETS = tuple(2**k for k in range(11, 17))  # 2,048 to 65,536 padded tokens a batch
# Past the knee a larger batch buys too little to tell from noise, and every request in it waits for it all.
TOLERANCE = 0.05

log = logging.getLogger("neoembed.serve")

Embed = Callable[[list[list[int]]], object]


def repeated_input(model: ModelInfo, length: int) -> list[int]:
    """An input of `length` tokens (at most the model's max length): one word repeated, framed as the tokenizer
    frames a text."""
    framed = model.tokenizer("word")["input_ids"]  # [CLS] word [SEP] for BERT's vocabulary
    length = min(length, model.max_length)
    return framed[:1] + framed[1:-1] * (length - 2) + framed[-1:]


def filled_batch(model: ModelInfo, budget: int, length: int) -> list[list[int]]:
    """As many `repeated_input`s of `length` tokens as fill `budget` tokens (at least one)."""
    ids = repeated_input(model, length)
    return [ids] * max(1, budget // len(ids))


def gpu_candidates(max_length: int) -> list[int]:
    """The budgets timed on a GPU, each of which holds at least one full-length input."""
    return sorted({max(budget, max_length) for budget in GPU_BUDGETS})


def fastest_budget(tokens_per_second: Mapping[int, float], tolerance: float = TOLERANCE) -> int:
    """The smallest budget whose tokens/s is within `tolerance` of the fastest budget's."""
    best = max(tokens_per_second.values())
    return min(budget for budget, rate in tokens_per_second.items() if rate >= (1 - tolerance) * best)


def fixed_budget(settings: ServeSettings, device_type: str, max_length: int) -> int | None:
    """The budget known before the port is bound: --max-batch-tokens, else on the CPU its measured constant (at
    least one full-length input); None on any other device, where `measure_budget` times it after binding."""
    if settings.max_batch_tokens is not None:
        return settings.max_batch_tokens
    if device_type == "cpu":
        return max(CPU_BATCH_TOKENS, max_length)
    return None


def provisional_budget(max_length: int) -> int:
    """The budget batches use while the sweep runs: its smallest candidate, which holds a full-length input and
    is the first size the sweep itself runs."""
    return gpu_candidates(max_length)[0]


def measure_budget(
    embed: Embed,
    model: ModelInfo,
    clock: Callable[[], float] = time.perf_counter,
    on_timed: Callable[[], None] = lambda: None,
) -> int:
    """The fastest budget of a sweep timed with `embed`, calling `on_timed` after each candidate."""
    length = min(MEASURE_LENGTH, model.max_length)
    rates = {}
    for budget in gpu_candidates(model.max_length):
        batch = filled_batch(model, budget, length)
        embed(batch)  # the shape's first call: kernels chosen, memory allocated, a compiled model compiles
        started = clock()
        embed(batch)
        rates[budget] = len(batch) * length / (clock() - started)
        on_timed()
    chosen = fastest_budget(rates)
    log.info(
        "batch budget %d tokens, the fastest of %s",
        chosen,
        {b: f"{r:,.0f} tokens/s" for b, r in rates.items()},
    )
    return chosen
