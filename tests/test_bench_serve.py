"""bench serve's baseline: direct encode at its fastest batch size of those timed."""

from neoembed.bench.serve import ModelResult


def test_the_ratios_baseline_is_encode_at_its_fastest_batch():
    result = ModelResult("m", "m", 100, {32: [2.0, 1.5], 256: [1.2, 1.4], 1024: [1.3]}, {})
    assert result.best_batch == 256 and result.best_direct == 1.2
