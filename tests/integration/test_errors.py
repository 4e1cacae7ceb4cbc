"""Failures surface on the driver with rank and traceback, and leave nothing behind."""

import re
import time

import pytest
import ray

import raytf

from .cluster_state import assert_nothing_left, live_raytf_placement_groups


def failing_loop(config):
    import tensorflow as tf

    ctx = raytf.get_context()

    @tf.function
    def step():
        return ctx.strategy.run(
            lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0))
        )

    for i in range(1000):
        step()
        if ctx.rank == 1 and i == 3:
            raise ValueError(f"bad batch at step {i}")  # the line the traceback must show
        time.sleep(0.01)


def test_rank_error_reaches_driver_and_nothing_remains(ray_cluster, storage):
    # Failures are allowed, but a bug in user code is raised, not retried.
    trainer = raytf.Trainer(
        failing_loop,
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(
            name="err",
            storage_path=storage,
            verbose=0,
            failure_config=raytf.FailureConfig(max_failures=2),
        ),
    )
    with pytest.raises(raytf.TrainingFailedError) as info:
        trainer.fit()
    err = info.value
    assert "rank 1 raised ValueError: bad batch at step 3" in str(err)
    assert "Traceback from rank 1" in str(err)
    assert 'raise ValueError(f"bad batch at step {i}")' in str(err)
    cause = err.causes[0]
    assert isinstance(cause, raytf.WorkerError) and cause.rank == 1
    assert err.result.attempts == 1  # not retried
    assert_nothing_left()


def test_unsatisfiable_request_fails_fast_with_numbers(ray_cluster, storage):
    trainer = raytf.Trainer(
        failing_loop,
        scaling_config=raytf.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 64}),
        run_config=raytf.RunConfig(name="big", storage_path=storage),
    )
    with pytest.raises(
        raytf.UnsatisfiableResourcesError, match=r"asks for 64 CPU.*largest node has 4 CPU"
    ):
        trainer.fit()

    gpu = raytf.Trainer(
        failing_loop,
        scaling_config=raytf.ScalingConfig(num_workers=1, use_gpu=True),
        run_config=raytf.RunConfig(name="gpu", storage_path=storage),
    )
    with pytest.raises(
        raytf.UnsatisfiableResourcesError, match=r"1 GPU.*no node of the cluster has any GPU"
    ):
        gpu.fit()

    too_many = raytf.Trainer(
        failing_loop,
        scaling_config=raytf.ScalingConfig(num_workers=5),
        run_config=raytf.RunConfig(name="many", storage_path=storage),
    )
    with pytest.raises(raytf.UnsatisfiableResourcesError, match=r"fit 4 in all"):
        too_many.fit()
    assert not live_raytf_placement_groups()


def test_elastic_minimum_never_placed_is_a_clear_error(ray_cluster, storage):
    # Another job holds 3 of the 4 CPUs: an elastic (2, 3) group can place 1 worker.
    other = ray.util.placement_group([{"CPU": 3}])
    ray.get(other.ready())
    try:
        trainer = raytf.Trainer(
            failing_loop,
            scaling_config=raytf.ScalingConfig(num_workers=(2, 3), elastic_wait_s=0.5),
            run_config=raytf.RunConfig(
                name="min", storage_path=storage, verbose=0, placement_timeout_s=3
            ),
        )
        t0 = time.monotonic()
        with pytest.raises(raytf.TrainingFailedError) as info:
            trainer.fit()
        # Measured 3.1 s (CI, 2 cores); waiting on the placement would take its 60 s.
        assert time.monotonic() - t0 < 30
        message = str(info.value)
        assert "could place 1 of the at least 2 workers" in message
        assert "num_workers = (2, 3)" in message and "placement_timeout_s" in message
        assert isinstance(info.value.causes[0], raytf.PlacementTimeoutError)
    finally:
        ray.util.remove_placement_group(other)
    assert_nothing_left()


def reports_an_object(config):
    raytf.report({"step": 1, "loss": object()})


def returns_a_lock(config):
    import threading

    return threading.Lock()


@pytest.mark.parametrize(
    "loop, expected",
    [
        (reports_an_object, r"metric 'loss' on rank [01] is a object"),
        (returns_a_lock, r"rank [01]: train_loop_per_worker returned a lock that cannot be sent"),
    ],
)
def test_what_a_loop_reports_or_returns_wrongly_is_named(ray_cluster, storage, loop, expected):
    trainer = raytf.Trainer(
        loop,
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(
            storage_path=storage,
            verbose=0,
            failure_config=raytf.FailureConfig(max_failures=1),
        ),
    )
    with pytest.raises(raytf.TrainingFailedError) as info:
        trainer.fit()
    assert re.search(expected, str(info.value)), str(info.value)
    assert info.value.result.attempts == 1  # the user's mistake is not retried
    assert_nothing_left()
