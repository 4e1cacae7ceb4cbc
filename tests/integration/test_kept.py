"""Processes kept between runs: a run is served by them (by pid), ends exactly as a cold
run does, takes each process once, and an unclaimed one exits after its idle timeout."""

import os
import time

import raytf
from raytf.group import kept

from .cluster_state import assert_nothing_left
from .test_train import loop_with_pid

CONFIG = {"steps": 32, "batch_size": 64, "seed": 9, "report_every": 8, "lr": 3e-3}


def trainer(storage, name):
    return raytf.Trainer(
        loop_with_pid,
        train_loop_config=CONFIG,
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(name=name, storage_path=storage, verbose=0),
    )


def wait_for(condition, timeout_s=90.0):
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)
    return value


def test_a_run_is_served_by_kept_processes_and_ends_as_a_cold_one(ray_cluster, storage):
    cold = trainer(storage, "cold").fit()
    try:
        assert kept.start(per_node=2, idle_s=300) == 2
        ready = wait_for(lambda: _imported(2))
        kept_pids = {row["pid"] for row in ready}
        warm = trainer(storage, "warm").fit()
        assert {r["pid"] for r in warm.worker_results} == kept_pids
        assert warm.worker_results[0]["weights_digest"] == cold.worker_results[0]["weights_digest"]
        assert kept.listing() == []  # each served one run, and ended with it
    finally:
        kept.stop()
    assert_nothing_left()


def test_an_unclaimed_kept_process_exits_after_its_idle_timeout(ray_cluster):
    try:
        kept.start(per_node=1, idle_s=4)
        (row,) = wait_for(lambda: kept.listing() or None, timeout_s=30)
        wait_for(lambda: not kept.listing(), timeout_s=30)
        gone = wait_for(lambda: _gone(row["pid"]), timeout_s=10)
        assert gone
    finally:
        kept.stop()
    assert_nothing_left()


def _imported(n: int) -> list | None:
    rows = [row for row in kept.listing() if row["tf_imported"]]
    return rows if len(rows) == n else None


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
