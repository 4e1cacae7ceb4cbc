"""What a loop reports and returns is checked on the worker, where the mistake is made."""

import threading

import numpy as np
import pytest

from raytf.worker.context import clean_metrics
from raytf.worker.user_fn import UnsendableResultError, sendable


def test_metrics_become_plain_values():
    clean = clean_metrics({"loss": np.float32(0.5), "step": np.int64(3), "w": np.ones(2)}, 0)
    assert clean == {"loss": 0.5, "step": 3, "w": [1.0, 1.0]}
    assert type(clean["loss"]) is float


def test_a_non_numeric_metric_names_the_key_the_rank_and_the_type():
    with pytest.raises(TypeError, match=r"metric 'loss' on rank 1 is a object"):
        clean_metrics({"loss": object()}, 1)
    with pytest.raises(TypeError, match=r"metric 'm' on rank 0 is a dict"):
        clean_metrics({"m": {"a": 1}}, 0)


def test_an_unpicklable_return_value_names_the_rank():
    with pytest.raises(UnsendableResultError, match=r"rank 2: .* returned a lock"):
        sendable(threading.Lock(), 2)
    assert sendable({"ok": [1, 2]}, 0) == {"ok": [1, 2]}
