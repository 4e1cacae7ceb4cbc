"""Ray Data input: equal shards read as tf.data, every example once per epoch, resume at
an epoch boundary, and clear errors (never a hang) for shards that cannot keep step."""

import os
import signal
import time

import pytest
import ray

import jobs.train_ray_data as train_ray_data
import raytf
from raytf.data.synthetic import NUM_EXAMPLES

from .cluster_state import assert_nothing_left
from .jobrun import JobRun


@pytest.mark.slow
def test_recovery_resumes_at_the_epoch_boundary(cluster_env, storage):
    """SIGKILL a rank in mid-epoch: the restart resumes from the epoch-end checkpoint and
    redoes that epoch whole, so every example is still trained on once per epoch (counted
    inside the training step, summed over both ranks: the shards are disjoint and
    together cover the data set), the model learns, and nothing is left on the cluster."""
    args = ["--workers", "2", "--epochs", "2", "--count-examples", "--max-failures", "1"]
    run = JobRun(
        storage,
        "resume",
        *args,
        "--step-sleep",
        "0.05",
        env=cluster_env,
        job=train_ray_data.__file__,
    ).start()
    try:
        steps_per_epoch = NUM_EXAMPLES // 128
        state = run.wait_for(step=steps_per_epoch + 12)  # epoch 1, after epoch 0's checkpoint
        assert state["checkpoints"][-1] == steps_per_epoch
        run.signal_worker(1, signal.SIGKILL, state)
        rc, summary = run.finish()
    finally:
        run.stop()
    assert rc == 0, run.output()[-3000:]
    assert summary["attempts"] == 2 and len(summary["failures"]) == 1
    assert f"resuming after step {steps_per_epoch}" in run.output()
    assert summary["examples_seen"] == {"min": 1, "max": 1, "total": 2 * NUM_EXAMPLES}
    assert summary["steps"] == 2 * steps_per_epoch
    assert summary["digests_agree"] and summary["world_size"] == 2
    assert summary["final_metrics"]["accuracy"] > 0.6
    assert_nothing_left()


def shard_loop(config):
    """Reads the shard for one epoch; rank 1 may be given another global batch (a bug)."""
    import tensorflow as tf

    ctx = raytf.get_context()
    batch = config["batch"] * (2 if ctx.rank == 1 and config.get("uneven") else 1)
    data = ctx.get_dataset_shard("train").to_tf("x", "y", global_batch_size=batch)
    dist = ctx.strategy.distribute_datasets_from_function(lambda _: data)

    @tf.function
    def step(b):
        x, y = b
        return ctx.strategy.run(
            lambda x: tf.distribute.get_replica_context().all_reduce("sum", tf.reduce_sum(x)),
            args=(x,),
        )

    n = 0
    for b in dist:
        step(b)
        n += 1
        ctx.step_end(n)
        time.sleep(0.02)
    return {"steps": n}


def tiny(rows: int, known: bool = True):
    import numpy as np

    ds = ray.data.from_items([{"x": np.float32(i), "y": i % 2} for i in range(rows * 4)])
    if known:
        return ds.limit(rows)
    return ds.filter(lambda r: r["x"] < rows)  # Ray cannot count it without running it


def fit(storage, name, ds, batch, **config):
    return raytf.Trainer(
        shard_loop,
        train_loop_config={"batch": batch, **config},
        datasets={"train": ds},
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(name=name, storage_path=storage, verbose=0),
    ).fit()


def test_dataset_smaller_than_a_global_batch_is_refused_before_start(ray_cluster, storage):
    t0 = time.monotonic()
    with pytest.raises(raytf.DataShardError, match="fewer than one global batch of 128"):
        raytf.Trainer(
            shard_loop,
            train_loop_config={"batch": 128},
            datasets={"train": ray.data.range(100)},
            scaling_config=raytf.ScalingConfig(num_workers=2, global_batch_size=128),
            run_config=raytf.RunConfig(name="small", storage_path=storage, verbose=0),
        ).fit()
    # Measured 0.17 s (CI, 2 cores); a started worker alone spends 5-7 s importing TF.
    assert time.monotonic() - t0 < 10
    assert_nothing_left()


def test_empty_shards_found_at_run_time_are_a_clear_error(ray_cluster, storage):
    t0 = time.monotonic()
    with pytest.raises(raytf.TrainingFailedError, match="gave no full batch of 32 rows") as info:
        fit(storage, "empty", tiny(40, known=False), 64)
    assert info.value.result.attempts == 1  # not retried: the data would split alike
    # Measured 12.5 s (CI, 2 cores); the hang watchdog would wait its phase timeout.
    assert time.monotonic() - t0 < 90, "must not wait for the hang watchdog"
    assert_nothing_left()


def test_uneven_batches_across_ranks_are_a_clear_error(ray_cluster, storage):
    t0 = time.monotonic()
    with pytest.raises(raytf.TrainingFailedError, match="every rank must read the same"):
        fit(storage, "uneven", tiny(512), 32, uneven=True)
    # Measured 8.9 s (CI, 2 cores); a collective stuck on the short rank would wait for
    # the hang watchdog's phase timeout.
    assert time.monotonic() - t0 < 90
    assert_nothing_left()


def test_bad_datasets_argument_names_the_problem(storage):
    run_config = raytf.RunConfig(name="bad", storage_path=storage)
    with pytest.raises(raytf.ConfigError, match=r"datasets\['train'\] is a list"):
        raytf.Trainer(shard_loop, datasets={"train": [1, 2]}, run_config=run_config)
    assert os.listdir(storage) == []  # refused before anything was written for the run
