"""Random documents of varied lengths over a small vocabulary, for pretraining tests."""

import numpy as np

WORDS = [
    "the",
    "a",
    "dog",
    "cat",
    "runs",
    "sleeps",
    "under",
    "over",
    "bright",
    "river",
    "stone",
    "green",
    "old",
    "new",
    "city",
    "light",
    "dark",
]


def random_documents(n: int, seed: int = 0, min_words: int = 3, max_words: int = 40) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(min_words, max_words))) for _ in range(n)]
