"""What a loop reports and returns is checked on the worker, where the mistake is made."""

import threading

import numpy as np
import pytest

from raytf.worker.report_values import clean_metrics
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


def _context(storage, parts):
    from raytf.worker.context import TrainContext, _ReportBuffer
    from tests.unit.one_rank import one_rank
    from tests.unit.test_worker_checkpointer import checkpointer

    ckpt = checkpointer(storage, parts, every_steps=5)
    return TrainContext(
        **one_rank(run_dir=storage.url(), buffer=_ReportBuffer(), checkpointer=ckpt)
    )


NO_STATE = "this loop names no state to raytf's checkpoints: a lost worker restarts it"


def test_a_loop_that_names_no_state_is_told_so_once_at_its_first_step(storage, parts, capfd):
    """The quick start's first loop reports steps and calls neither ``restore`` nor
    ``step_end``: nothing checkpoints it, and a lost worker starts it again at step 0."""
    ctx = _context(storage, parts)
    ctx.report({"loss": 1.0})  # not a step: nothing said yet
    assert NO_STATE not in capfd.readouterr().out
    for step in range(1, 4):
        ctx.report({"step": step, "loss": 1.0})
    assert capfd.readouterr().out.count(NO_STATE) == 1


def test_a_loop_that_names_its_state_or_keeps_ray_trains_is_not_told(storage, parts, capfd):
    from tests.unit.test_worker_checkpointer import make_model

    named = _context(storage, parts)
    model, optimizer = make_model(0)
    named.restore(model=model, optimizer=optimizer)
    named.step_end(1)
    moved = _context(storage, parts)
    moved.state_said = True  # what raytf.integrations.ray_train.report sets
    moved.report({"step": 1})
    assert NO_STATE not in capfd.readouterr().out
