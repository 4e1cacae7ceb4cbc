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


# -- local mode through the cluster's plan and lease (issue 50) ------------------------------
def nan_loop(config):
    """A custom loop whose weights turn NaN at step 12, a checkpoint every 5 steps."""
    import numpy as np

    ctx = raytf.get_context()
    with ctx.strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    start = ctx.restore(model=model)
    for step in range(start + 1, 21):
        if step == 12:
            model.layers[0].kernel.assign(np.full((4, 2), np.nan, "float32"))
        ctx.step_end(step)


def manifest(storage: str, name: str, step: int) -> dict:
    path = os.path.join(storage, name, "checkpoints", f"step_{step:09d}", "manifest.json")
    with open(path) as f:
        return json.load(f)


def test_a_local_run_refuses_nan_weights_and_commits_under_its_lease(tmp_path, capsys):
    """Local mode once built the checkpointer's settings by hand and dropped
    ``refuse_nonfinite`` (steps 15 and 20 committed holding NaN), and committed with no
    lease holder. It now takes the cluster's plan: what a cluster run commits."""
    from raytf.checkpoint.layout import committed
    from raytf.rundir.storage import Storage

    result = raytf.Trainer(
        nan_loop,
        scaling_config=raytf.ScalingConfig(num_workers=0),
        run_config=raytf.RunConfig(
            name="nan",
            storage_path=str(tmp_path),
            verbose=0,
            checkpoint_config=raytf.CheckpointConfig(checkpoint_every_steps=5, num_to_keep=5),
        ),
    ).fit()
    assert committed(Storage(str(tmp_path / "nan"))) == [5, 10]
    assert result.checkpoint.endswith("step_000000010")
    assert "checkpoint at step 15 not committed: the model's weights hold NaN" in (
        capsys.readouterr().out
    )
    holder = manifest(str(tmp_path), "nan", 10)["holder"]
    assert holder and holder["generation"] >= 1


def test_resume_from_checkpoint_with_start_fresh_starts_from_it_in_local_mode(tmp_path):
    """As on a cluster (tests/integration/test_train.py): the seed is put in once the run
    directory is held, after ``start_fresh`` set the earlier run aside. Local mode seeded
    first, so the earlier run's files and the seed went aside together: from scratch."""
    from raytf.integrations import ray_train
    from tests.ray_train_loops import read_checkpoint

    given, reported = tmp_path / "given", tmp_path / "reported"
    given.mkdir()
    reported.mkdir()
    (given / "epoch.txt").write_text("epoch 3")

    def trainer(report, start_fresh=False, **kwargs):
        return ray_train.TensorflowTrainer(
            read_checkpoint,
            train_loop_config={"report": report},
            scaling_config=raytf.ScalingConfig(num_workers=0),
            run_config=raytf.RunConfig(
                name="resumed",
                storage_path=str(tmp_path / "runs"),
                verbose=0,
                start_fresh=start_fresh,
            ),
            **kwargs,
        )

    first = trainer(str(reported)).fit()
    assert first.worker_results == [None] and first.checkpoint is not None
    seed = ray_train.Checkpoint.from_directory(str(given))
    again = trainer(None, start_fresh=True, resume_from_checkpoint=seed).fit()
    assert again.worker_results == ["epoch 3"]
