"""The control-plane scale test: many workers, no TensorFlow, the same driver.

What grows with the number of workers is the driver's side: one actor call
per worker per round (poll), the placement group's bundles, the rank-ordered
bookkeeping. To measure it alone, workers here are real ``RaytfWorker``
actors with three parts swapped for TF-free stand-ins: no TF import, a
strategy that only knows its replica count, no coordination-service watcher.
Placement, ports, TF_CONFIG, start, polling, reports, the watchdog and
teardown are the production code. Each worker holds a fraction of a CPU, so
64 fit on a 2-core machine; each step is a short sleep.

The figures are the driver's time per round (``Result.driver_round_ms``: a
round's wall time, its sleep between polls excluded, and the driver thread's
own CPU time in it) at each size, and their ratios to the smallest size:
linear growth means a ratio tracks the size ratio. The wall time also holds
the slowest worker's answer, which on a 2-core machine running 64 processes
waits for a CPU; the CPU time is the driver machinery alone.
"""

from __future__ import annotations

import json
import os
import time

import ray

from raytf.config import FailureConfig, RunConfig, ScalingConfig
from raytf.group.pool import WorkerPool
from raytf.worker.actor import RaytfWorker


class _CountOnly:
    """All of a strategy the driver's start-up asks for."""

    def __init__(self, replicas: int):
        self.num_replicas_in_sync = replicas


def _no_tf() -> None:
    pass


class LiteWorker(RaytfWorker):
    _warm_up = staticmethod(_no_tf)

    def _make_strategy(self, tf_config: str, communication: str) -> int:
        self._strategy = _CountOnly(len(json.loads(tf_config)["cluster"]["worker"]))
        return self._strategy.num_replicas_in_sync

    def _start_watchers(self, checkpointer) -> None:
        pass  # the termination-notice watcher reads TF's coordination service


class LitePool(WorkerPool):
    def __init__(self, scaling: ScalingConfig, **kwargs):
        super().__init__(scaling, **kwargs)
        self._actor_cls = ray.remote(LiteWorker)


def sleep_loop(config: dict) -> dict:
    """Each step a sleep; ``step_end`` and ``report`` as a real loop calls them."""
    import raytf

    ctx = raytf.get_context()
    steps, step_s = int(config["steps"]), float(config["step_s"])
    for step in range(1, steps + 1):
        time.sleep(step_s)
        ctx.step_end(step)
        if step % 8 == 0 or step == steps:
            ctx.report({"step": step})
    return {"steps": steps}


def run_size(workers: int, storage: str, steps: int, step_s: float) -> dict:
    """One run of ``workers`` lite workers; the driver's round times and the wall time."""
    from raytf.driver.launch import RunSpec, make_controller

    cpus = round(min(1.0, 1.6 / workers), 3)  # 64 of them fit in 2 CPUs
    run_config = RunConfig(
        name=f"control-plane-{workers}",
        storage_path=storage,
        verbose=0,
        setup_timeout_s=300.0,
        placement_timeout_s=300.0,
        failure_config=FailureConfig(max_failures=0),
    )
    scaling = ScalingConfig(num_workers=workers, resources_per_worker={"CPU": cpus})
    t0 = time.monotonic()
    spec = RunSpec(sleep_loop, {"steps": steps, "step_s": step_s}, scaling, run_config)
    controller = make_controller(spec, pool_cls=LitePool)
    result = controller.run()
    wall = time.monotonic() - t0
    return {"workers": workers, "wall_s": round(wall, 2), **result.driver_round_ms}


def scale_table(sizes: list[int], storage: str, steps: int, step_s: float) -> list[dict]:
    rows = [run_size(n, os.path.join(storage, "cp"), steps, step_s) for n in sizes]
    base = rows[0]
    for row in rows:
        row["size_ratio"] = round(row["workers"] / base["workers"], 2)
        row["round_ratio"] = round(row["median"] / base["median"], 2)
        row["cpu_ratio"] = round(row["cpu_median"] / base["cpu_median"], 2)
    return rows
