"""The build's pair-key set holds exactly what a Python set would, in 11 to 23 bytes a key."""

import numpy as np

from neoembed.data.key_set import KeySet


def test_holds_exactly_what_a_python_set_holds_through_every_resize():
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**64, size=30_000, dtype=np.uint64).tolist()
    keys += keys[:500] + [0, 0, 2**64 - 1, 1 << 16, 2 << 16]  # repeats, the empty marker, colliding low bits
    ours, reference = KeySet(capacity=16), set()
    for key in keys[:15_000]:  # one at a time, as stage 1 adds them
        assert (key in ours) == (key in reference)
        ours.add(key)
        reference.add(key)
    ours.update(np.asarray(keys[15_000:], dtype=np.uint64))  # at once, as a staged source's keys
    reference.update(keys[15_000:])
    assert len(ours) == len(reference)
    probes = keys + rng.integers(0, 2**64, size=5_000, dtype=np.uint64).tolist()
    assert [key in ours for key in probes] == [key in reference for key in probes]


def test_a_key_takes_11_to_23_bytes():
    ours = KeySet()
    ours.update(np.arange(1, 1_000_001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    assert len(ours) == 1_000_000
    assert 8 / 0.7 <= ours._slots.nbytes / len(ours) <= 8 / 0.35
