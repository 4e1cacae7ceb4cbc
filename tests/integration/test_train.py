"""Two real MWMS workers on a real local Ray instance."""

import json
import os
import time

import numpy as np

import jobs.train_synthetic as train_synthetic
import raytf
from tests.ray_train_loops import read_checkpoint as _read_checkpoint

from .cluster_state import assert_nothing_left

ARGS = ["--workers", "2", "--steps", "48", "--report-every", "8", "--seed", "7"]


def test_digests_agree_and_the_state_is_recorded(ray_cluster, storage):
    """(That a fixed seed repeats, every fault test shows: each ends with the weights of
    the session's reference run, made in another process, on another cluster for some.)"""
    first = train_synthetic.main(ARGS + ["--storage", storage, "--name", "a"])

    assert first["steps"] == 48 and first["attempts"] == 1
    assert first["digests_agree"], "workers ended with different weights"

    with open(os.path.join(storage, "a", "state.json")) as f:
        state = json.load(f)
    assert state["state"] == "FINISHED" and state["last_step"] == 48
    assert sorted(w["rank"] for w in state["workers"]) == [0, 1]
    assert len({w["pid"] for w in state["workers"]}) == 2


class SlowRecorder(raytf.Callback):
    """A driver-side callback that takes 2 s over the first report."""

    def __init__(self):
        self.reports, self.checkpoints, self.states = [], [], []

    def on_report(self, metrics):
        if not self.reports:
            time.sleep(2.0)
        self.reports.append(metrics)

    def on_checkpoint(self, step, path):
        self.checkpoints.append(step)

    def on_state(self, old, new):
        self.states.append(new)


def test_loss_history_streams_and_falls_and_callbacks_hear_it_without_stalling(
    ray_cluster, storage
):
    recorder = SlowRecorder()
    trainer = raytf.Trainer(
        train_synthetic.train_loop,
        train_loop_config={"steps": 64, "batch_size": 64, "seed": 1, "report_every": 4, "lr": 3e-3},
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(
            name="hist",
            storage_path=storage,
            verbose=0,
            callbacks=[recorder],
            checkpoint_config=raytf.CheckpointConfig(checkpoint_every_steps=32),
        ),
    )
    result = trainer.fit()
    losses = [m["loss"] for m in result.metrics_history]
    assert [m["step"] for m in result.metrics_history] == list(range(4, 65, 4))
    assert losses[-1] < 0.6 * losses[0], losses
    assert result.metrics["accuracy"] > 0.6
    # Every event reached the callback, in order; the 2 s it spent sleeping never held
    # up a round of the driver's loop (a round blocked on it would take over 2000 ms).
    assert recorder.reports == result.metrics_history
    assert recorder.checkpoints == [32, 64]
    assert recorder.states == ["STARTING", "RUNNING", "FINISHED"]
    assert result.driver_round_ms["max"] < 1500, result.driver_round_ms
    assert_nothing_left()


def slow_teardown_loop(config):
    """A user's own pipeline, autotuned, whose elements past the run's end take
    20 s each: when the loop returns, its map calls are in flight, and destroying
    the iterator waits for them (as an autotuned pipeline's threads do)."""
    import time

    import tensorflow as tf

    ctx = raytf.get_context()
    steps = config["steps"]

    def make(i):
        time.sleep(20.0 if i >= steps else 0.0)
        return float(i)

    ds = (
        tf.data.Dataset.range(10_000)
        .map(
            lambda i: tf.py_function(make, [i], tf.float32),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .prefetch(tf.data.AUTOTUNE)
    )
    it = iter(ctx.strategy.experimental_distribute_dataset(ds.batch(1)))

    @tf.function
    def step(x):
        return ctx.strategy.reduce("SUM", ctx.strategy.run(tf.reduce_sum, args=(x,)), axis=None)

    for i in range(1, steps + 1):
        step(next(it))
        ctx.step_end(i)
    return {"last_step_at": time.time()}


def test_a_run_ends_when_its_last_step_ends_not_when_its_pipeline_is_torn_down(
    ray_cluster, storage
):
    import time

    trainer = raytf.Trainer(
        slow_teardown_loop,
        train_loop_config={"steps": 8},
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(name="teardown", storage_path=storage, verbose=0),
    )
    result = trainer.fit()
    ended = time.time()
    last = max(r["last_step_at"] for r in result.worker_results)
    # Without the reaper, the loop's return waits >= 20 s for the in-flight map calls.
    assert ended - last < 3.0, f"fit() returned {ended - last:.1f} s after the last step"
    assert_nothing_left()


def loop_with_pid(config):
    out = train_synthetic.train_loop(config)
    out["pid"] = os.getpid()
    return out


def test_local_mode_runs_the_loop_here_on_one_workers_loss_curve(ray_cluster, storage):
    config = {"steps": 32, "batch_size": 64, "seed": 3, "report_every": 4, "lr": 3e-3}
    results = {}
    for workers in (0, 1):
        results[workers] = raytf.Trainer(
            loop_with_pid,
            train_loop_config=config,
            scaling_config=raytf.ScalingConfig(num_workers=workers),
            run_config=raytf.RunConfig(
                name=f"local{workers}",
                storage_path=storage,
                verbose=0,
                checkpoint_config=raytf.CheckpointConfig(checkpoint_every_steps=16),
            ),
        ).fit()
    local, one = results[0], results[1]
    assert local.worker_results[0]["pid"] == os.getpid() != one.worker_results[0]["pid"]
    assert [m["step"] for m in local.metrics_history] == [m["step"] for m in one.metrics_history]
    np.testing.assert_allclose(
        [m["loss"] for m in local.metrics_history],
        [m["loss"] for m in one.metrics_history],
        rtol=1e-5,
    )
    assert local.checkpoint.endswith("step_000000032")  # committed like a run's
    with open(os.path.join(storage, "local0", "state.json")) as f:
        assert json.load(f)["state"] == "FINISHED"


def test_resume_from_checkpoint_trains_on_from_it_even_with_start_fresh(
    ray_cluster, storage, tmp_path
):
    """Ray Train's ``resume_from_checkpoint`` over a run name that reported a checkpoint
    of its own: with ``start_fresh`` the earlier run's files are set aside, and the loop
    starts from the checkpoint given, not from scratch and not from the earlier run's."""
    from raytf.integrations import ray_train

    given = tmp_path / "given"
    given.mkdir()
    (given / "epoch.txt").write_text("epoch 3")
    reported = tmp_path / "reported"
    reported.mkdir()

    def trainer(report, start_fresh=False, **kwargs):
        run = raytf.RunConfig(
            name="resumed", storage_path=storage, verbose=0, start_fresh=start_fresh
        )
        return ray_train.TensorflowTrainer(
            _read_checkpoint,
            train_loop_config={"report": report},
            scaling_config=raytf.ScalingConfig(num_workers=2),
            run_config=run,
            **kwargs,
        )

    first = trainer(str(reported)).fit()
    assert first.worker_results == [None, None] and first.checkpoint is not None
    seed = ray_train.Checkpoint.from_directory(str(given))
    again = trainer(None, start_fresh=True, resume_from_checkpoint=seed).fit()
    assert again.worker_results == ["epoch 3", "epoch 3"]
    kept = os.listdir(os.path.join(storage, "resumed", "previous"))
    assert len(kept) == 1  # the earlier run, set aside whole: its checkpoint with it
