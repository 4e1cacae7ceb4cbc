"""Local mode (``num_workers=0``) ends a run as a worker does: the rank host's final save.

In-process, no Ray: the loop runs here with a one-device strategy.
"""

import json
import os

import keras
import pytest

import raytf

pytestmark = pytest.mark.unit


def loop(config):
    ctx = raytf.get_context()
    with ctx.strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    start = ctx.restore(model=model)
    for step in range(start + 1, 5):
        ctx.report({"step": step, "loss": 1.0 / step})
        ctx.step_end(step)
    return "done"


def fit(storage: str, name: str) -> raytf.Result:
    return raytf.Trainer(
        loop,
        scaling_config=raytf.ScalingConfig(num_workers=0),
        run_config=raytf.RunConfig(
            name=name,
            storage_path=storage,
            verbose=0,
            checkpoint_config=raytf.CheckpointConfig(checkpoint_every_steps=2),
        ),
    ).fit()


def state(storage: str, name: str) -> dict:
    with open(os.path.join(storage, name, "state.json")) as f:
        return json.load(f)


def test_a_local_run_commits_and_writes_its_model(tmp_path):
    result = fit(str(tmp_path), "ok")
    assert result.worker_results == ["done"] and result.metrics["step"] == 4
    assert result.checkpoint.endswith("step_000000004")
    assert os.path.exists(os.path.join(tmp_path, "ok", "model", "model.keras"))
    assert state(str(tmp_path), "ok")["state"] == "FINISHED"


def test_a_failed_final_save_is_said_and_the_finished_run_kept(tmp_path, monkeypatch, capsys):
    """It used to escape the run: state.json stayed RUNNING and fit() raised."""

    def fails(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("raytf.checkpoint.model_out.save_final", fails)
    result = fit(str(tmp_path), "nosave")
    assert result.worker_results == ["done"]
    assert "the model file was not written (disk full)" in capsys.readouterr().out
    assert state(str(tmp_path), "nosave")["state"] == "FINISHED"
