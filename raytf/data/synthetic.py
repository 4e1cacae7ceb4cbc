"""The examples' synthetic data set: deterministic, built in code, nothing downloaded.

Gaussian features with labels from a fixed random linear teacher plus noise:
learnable (a small MLP passes 80 % accuracy in a few hundred steps) but not
trivial. The teacher depends on the seed only, so the ``validation`` split is
a held-out sample of the same task. The same seed gives the same arrays on
every worker and every run.
"""

from __future__ import annotations

import numpy as np

NUM_EXAMPLES = 8192
NUM_FEATURES = 32
NUM_CLASSES = 4
_SPLITS = {"train": 1, "validation": 2}


def make_dataset(
    seed: int, num_examples: int = NUM_EXAMPLES, split: str = "train"
) -> tuple[np.ndarray, np.ndarray]:
    teacher = np.random.default_rng([seed, 0]).standard_normal((NUM_FEATURES, NUM_CLASSES))
    rng = np.random.default_rng([seed, _SPLITS[split]])
    x = rng.standard_normal((num_examples, NUM_FEATURES)).astype(np.float32)
    noise = 0.5 * rng.standard_normal((num_examples, NUM_CLASSES))
    y = np.argmax(x @ teacher.astype(np.float32) + noise, axis=1).astype(np.int32)
    return x, y


def seen_summary(counts: np.ndarray) -> dict[str, int]:
    """The examples' ``--count-examples`` result: how often the least and most used example
    was trained on, and all uses together (min = max = epochs when nothing was lost)."""
    return {"min": int(counts.min()), "max": int(counts.max()), "total": int(counts.sum())}
