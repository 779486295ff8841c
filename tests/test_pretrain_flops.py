"""MFU accounting: model FLOPs per batch (attention from each batch's own lengths) and known GPU peaks."""

import pytest

from neoembed.pretrain.neobert import NeoBERTConfig, tiny_config
from neoembed.pretrain.neobert.flops import forward_flops, known_peak_tflops, training_flops


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),  # SXM
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA GeForce GTX 1080", None),
    ],
)
def test_known_gpu_peaks_tell_h100_parts_apart(name, tflops):
    assert known_peak_tflops(name) == tflops


def test_attention_flops_follow_each_batchs_sequence_lengths():
    config = tiny_config()
    one_long = training_flops(config, tokens=1024, sum_squared_lengths=1024**2, decoded=0)
    many_short = training_flops(config, tokens=1024, sum_squared_lengths=16 * 64**2, decoded=0)
    hidden, layers = config.hidden_size, config.num_hidden_layers
    assert one_long - many_short == 12 * layers * hidden * (1024**2 - 16 * 64**2)


def test_the_decoder_counts_only_predicted_tokens():
    config = tiny_config()
    sparse = training_flops(config, tokens=100, sum_squared_lengths=100, decoded=20)
    dense = training_flops(config, tokens=100, sum_squared_lengths=100, decoded=100)
    assert dense - sparse == 6 * 80 * config.hidden_size * config.vocab_size


def test_the_250m_forward_costs_about_half_a_gflop_per_token_and_training_three_forwards():
    config = NeoBERTConfig()
    per_token = forward_flops(config, tokens=1, sum_squared_lengths=0)
    assert 0.35e9 < per_token < 0.5e9  # 2 x ~200M matmul parameters (embeddings are lookups)
    assert training_flops(config, tokens=512, sum_squared_lengths=512**2, decoded=0) == 3 * forward_flops(
        config, tokens=512, sum_squared_lengths=512**2
    )
