"""The pure parts of bench pretrain's guards: the step-memory estimate, the budget that fits, trusted MFU."""

import pytest

from neoembed.bench.memory import StepMemory, fit_token_budget, step_memory
from neoembed.bench.mfu import Mfu
from neoembed.errors import InputError
from neoembed.pretrain.neobert import NeoBERTConfig

GIB = 2**30


def test_the_estimate_of_the_250m_step_that_was_oom_killed_exceeds_what_it_reached():
    memory = step_memory(NeoBERTConfig(), 512, value_bytes=4, scores=True)
    assert memory.fixed_bytes == pytest.approx(245_136_954 * 16, rel=1e-6), "the released model's parameters"
    assert memory.needs(8192) > 23e9, "the kernel killed it at 23 GB resident"
    bf16_gpu = step_memory(NeoBERTConfig(), 1024, value_bytes=2, scores=False)
    assert bf16_gpu.needs(32768) < 0.8 * 79 * GIB, "the GPU default fits an H100"


def test_a_default_budget_shrinks_to_whole_rows_that_fit_and_says_so():
    memory = StepMemory(fixed_bytes=4 * GIB, bytes_per_token=1e6)
    fits = fit_token_budget(2048, explicit=False, max_length=512, memory=memory, available_bytes=100 * GIB)
    assert fits.tokens == 2048 and fits.note is None
    lowered = fit_token_budget(8192, explicit=False, max_length=512, memory=memory, available_bytes=10 * GIB)
    assert lowered.tokens % 512 == 0 and 0 < lowered.tokens < 8192
    assert memory.needs(lowered.tokens) <= 0.8 * 10 * GIB < memory.needs(lowered.tokens + 512)
    assert "8,192" in lowered.note and "10.0 GiB available" in lowered.note


@pytest.mark.parametrize(("requested", "explicit", "available"), [(8192, True, 10), (8192, False, 4.5)])
def test_an_explicit_budget_or_one_without_room_for_a_row_is_an_input_error(requested, explicit, available):
    memory = StepMemory(fixed_bytes=4 * GIB, bytes_per_token=1e6)
    with pytest.raises(InputError, match="GiB available") as error:
        fit_token_budget(requested, explicit, max_length=512, memory=memory, available_bytes=available * GIB)
    assert error.value.param == "--token-budget"


def test_mfu_above_100_percent_is_a_measurement_error_not_a_figure():
    assert Mfu(3e12, 10e12).figure == pytest.approx(0.3) and Mfu(3e12, 10e12).text() == "30.0%"
    impossible = Mfu(1.395e12, 1e12)
    assert impossible.figure is None and not impossible.possible
    assert impossible.text() == "measurement error (139.5% of the peak is above 100%)"
