"""The run's Result from a RunRecord: what the controller and local mode both hand in."""

import pytest

from raytf.driver.outcome import RunRecord, build_result
from raytf.errors import TrainingFailedError

pytestmark = pytest.mark.unit


def record(**kw) -> RunRecord:
    base = dict(
        state="FINISHED",
        run_dir="/runs/r",
        attempts=2,
        elapsed_s=3.0,
        history=[{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}],
        worker_results=["a", "b"],
        checkpoint="/runs/r/checkpoints/step_2",
        best_checkpoints=[("/runs/r/checkpoints/step_2", 1.0)],
    )
    return RunRecord(**{**base, **kw})


def test_a_finished_run_gives_its_result_and_a_closing_line():
    lines = []
    result = build_result(record(), lines.append)
    assert result.metrics == {"step": 2, "loss": 1.0} and result.attempts == 2
    assert result.worker_results == ["a", "b"] and result.path == "/runs/r"
    assert result.checkpoint == "/runs/r/checkpoints/step_2" and result.failures == []
    assert lines == ["finished in 3.0 s: attempt 2, 0 failure(s), 0 preemption(s)"]


def test_a_stopped_run_names_what_stopped_it():
    lines = []
    build_result(record(state="STOPPED", stopped_by="SIGTERM"), lines.append)
    build_result(record(state="STOPPED"), lines.append)
    assert lines == ["stopped on SIGTERM after 3.0 s", "stopped on request after 3.0 s"]


def test_an_errored_run_raises_carrying_its_result_worded_by_the_caller():
    boom = ValueError("boom")
    with pytest.raises(TrainingFailedError) as info:
        build_result(record(state="ERRORED", error=boom))
    assert "training failed: boom" in str(info.value)
    assert info.value.result.error is boom and info.value.__cause__ is boom
    with pytest.raises(TrainingFailedError, match="local run failed: boom"):
        build_result(
            record(state="ERRORED", error=boom), failed=lambda r: f"local run failed: {r.error}"
        )
