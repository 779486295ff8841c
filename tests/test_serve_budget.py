"""The batcher's default token budget: the CPU's measured constant, and on a GPU the knee of a timed sweep."""

from neoembed.serve.budget import MEASURE_LENGTH, default_budget, fastest_budget, gpu_candidates
from neoembed.serve.worker import ModelInfo


def model_on(device: str, max_length: int = 512) -> ModelInfo:
    def tokenizer(text: str) -> dict[str, list[int]]:
        return {"input_ids": [101, 2773, 102]}  # [CLS] word [SEP]

    return ModelInfo(tokenizer, max_length, 384, device, "float32", None, None, compiled=False)


def test_the_smallest_budget_within_tolerance_of_the_fastest_is_chosen():
    assert fastest_budget({2048: 100.0, 4096: 180.0, 8192: 197.0, 16384: 200.0}) == 8192
    assert fastest_budget({2048: 150.0, 4096: 120.0, 8192: 90.0}) == 2048  # larger batches only slow down
    assert fastest_budget({4096: 100.0}) == 4096


def test_every_gpu_candidate_holds_a_full_length_input():
    assert gpu_candidates(512)[0] == 2048
    assert gpu_candidates(8192) == [8192, 16384, 32768, 65536]


def test_the_cpu_takes_its_measured_constant_without_timing_anything():
    def embed(batch):
        raise AssertionError("nothing is timed on the CPU")

    assert default_budget(embed, model_on("cpu")) == 1024
    assert default_budget(embed, model_on("cpu", max_length=2048)) == 2048  # a full-length input fits


def test_a_gpu_gets_the_knee_of_its_measured_throughput():
    """A device whose batches cost a fixed 2 ms launch plus 1 us a token: throughput keeps rising with the
    batch, by under 5% past 32,768 tokens, so 32,768 is chosen; each shape is run once untimed first."""
    now, calls = [0.0], []

    def embed(batch):
        calls.append((len(batch), {len(ids) for ids in batch}))
        now[0] += 0.002 + 1e-6 * sum(map(len, batch))

    chosen = default_budget(embed, model_on("cuda:0"), clock=lambda: now[0])
    assert chosen == 32768
    assert all(lengths == {MEASURE_LENGTH} for _, lengths in calls)
    sizes = [count for count, _ in calls]
    assert sizes[::2] == sizes[1::2] == [budget // MEASURE_LENGTH for budget in gpu_candidates(512)]
