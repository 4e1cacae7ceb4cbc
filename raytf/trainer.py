"""``raytf.Trainer``: the user's entry point, shaped like Ray Train's trainers."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import ray

from raytf.config import RunConfig, ScalingConfig
from raytf.data.feed import DataFeed, check_datasets, check_room
from raytf.driver.controller import Controller
from raytf.driver.progress import Progress
from raytf.errors import ConfigError, UnsatisfiableResourcesError
from raytf.group import autoscaler as autoscaling
from raytf.group.elastic import check_batch_splits
from raytf.group.feasibility import check_satisfiable
from raytf.result import Result

logger = logging.getLogger("raytf")
if os.environ.get("RAYTF_LOG_LEVEL"):
    logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logger.setLevel(os.environ["RAYTF_LOG_LEVEL"].upper())

EMBEDDED_NODE_IP = os.environ.get("RAYTF_EMBEDDED_NODE_IP", "127.0.0.2")


def ensure_ray(min_cpus: int | None = None) -> None:
    """Join the cluster named by RAY_ADDRESS, or start an embedded local instance.

    Code that already called ``ray.init`` (with any address) is left as it is,
    so the same job runs unchanged locally and under ``ray job submit``. An
    embedded instance gets at least ``min_cpus`` logical CPUs (a job that
    feeds its workers from Ray Data needs CPUs beyond theirs).
    """
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=True)
        return
    # An embedded instance is one machine: keep it on loopback. Ray rewrites 127.0.0.1
    # to the host's network address, so use another loopback address where Linux has one.
    node_ip = EMBEDDED_NODE_IP if sys.platform.startswith("linux") else None
    cpus = max(os.cpu_count() or 1, min_cpus or 0)
    ray.init(include_dashboard=False, log_to_driver=True, _node_ip_address=node_ip, num_cpus=cpus)


def alive_node_resources() -> list[dict[str, float]]:
    return [n["Resources"] for n in ray.nodes() if n.get("Alive")]


def check_cluster(scaling: ScalingConfig) -> None:
    """Fail at once if the cluster can never hold the group, now or after autoscaling.

    With an autoscaler whose node types are unknown, nothing can be ruled out:
    the placement waits (showing what it waits for) up to its timeout.
    """
    alive = alive_node_resources()
    # An elastic group starts with min workers: that many must fit, the rest may come later.
    args = (scaling.worker_resources(), scaling.min_workers, scaling.placement_strategy)
    if not autoscaling.autoscaler_running():
        check_satisfiable(*args, alive)
        return
    types = autoscaling.node_types()
    if types is None:
        logger.info("an autoscaler runs but its node types are unknown: placement will wait")
        return
    try:
        check_satisfiable(*args, autoscaling.potential_nodes(alive, types))
    except UnsatisfiableResourcesError as exc:
        shown = ", ".join(f"{n} {t.get('resources', {})}" for n, t in types.items())
        raise UnsatisfiableResourcesError(
            f"{exc}, counting every node the autoscaler could add (node types: {shown})"
        ) from None


class Trainer:
    """Runs ``train_loop_per_worker`` on every worker of one MWMS group.

    ``train_loop_per_worker`` takes the config dict (or nothing) and runs on
    each worker after the strategy exists; it reaches the strategy, its rank
    and ``report`` through ``raytf.get_context()``. ``datasets`` maps names to
    Ray Data datasets: each worker reads its equal shard with
    ``raytf.get_dataset_shard(name)``.
    """

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        train_loop_config: dict[str, Any] | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        datasets: dict[str, Any] | None = None,
    ):
        if not callable(train_loop_per_worker):
            raise ConfigError(
                f"train_loop_per_worker = {train_loop_per_worker!r}: must be a function"
            )
        if train_loop_config is not None and not isinstance(train_loop_config, dict):
            raise ConfigError(f"train_loop_config = {train_loop_config!r}: must be a dict or None")
        if scaling_config is not None and not isinstance(scaling_config, ScalingConfig):
            raise ConfigError(f"scaling_config = {scaling_config!r}: must be a ScalingConfig")
        if run_config is not None and not isinstance(run_config, RunConfig):
            raise ConfigError(f"run_config = {run_config!r}: must be a RunConfig")
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = dict(train_loop_config or {})
        self.scaling_config = scaling_config or ScalingConfig()
        self.run_config = run_config or RunConfig()
        self.datasets = check_datasets(datasets)
        check_batch_splits(self.scaling_config)

    def fit(self) -> Result:
        """Train to the end and return the Result; raise TrainingFailedError otherwise."""
        return make_controller(
            self.train_loop_per_worker,
            self.train_loop_config,
            self.scaling_config,
            self.run_config,
            datasets=self.datasets,
        ).run()

    def as_trainable(self):
        """A Ray Tune trainable: one trial, one run of this trainer with the trial's config
        merged over ``train_loop_config`` (see ``raytf.integrations.tune``)."""
        from raytf.integrations.tune import trainable

        return trainable(self)


def make_controller(
    fn: Callable[..., Any],
    config: dict[str, Any],
    scaling: ScalingConfig,
    run_config: RunConfig,
    what: str = "run",
    controller_cls: type[Controller] = Controller,
    datasets: dict[str, Any] | None = None,
) -> Controller:
    """Join or start Ray, rule out a cluster that can never hold the group, make the driver.

    Shared by ``Trainer.fit`` and ``Session``: both run the same controller.
    """
    ensure_ray()
    check_cluster(scaling)
    if datasets and not autoscaling.autoscaler_running():
        cpus = sum(r.get("CPU", 0.0) for r in alive_node_resources())
        workers = scaling.worker_resources().get("CPU", 0.0) * scaling.max_workers
        check_room(sorted(datasets), workers, cpus)
    os.makedirs(run_config.run_dir, exist_ok=True)
    progress = Progress(
        verbose=run_config.verbose, interval_s=run_config.progress_interval_s, stream=sys.stderr
    )
    progress.message(f"{what} {run_config.name} in {run_config.run_dir}")
    controller = controller_cls(ray.put(fn), config, scaling, run_config, progress)
    controller.data = DataFeed(datasets or {}, scaling.global_batch_size)
    controller.data.check(scaling.max_workers, progress.message)
    controller.data.fetch_schemas()
    return controller
