"""From a user's entry point to a running driver: one ``RunSpec``, one ``make_controller``.

``Trainer.fit``, ``Session`` and a Tune trial all start the same way: join or
start Ray, rule out a cluster that can never hold the group, check the Ray
Data input, open the progress display, and build the controller with every
collaborator it needs. What differs between them (a Tune trial's placement
group and listener, a Session's reply handler) is passed in here, never
assigned to the controller afterwards.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray

from raytf.config import RunConfig, ScalingConfig
from raytf.data.feed import DataFeed
from raytf.driver import ray_lines
from raytf.driver.controller import Controller
from raytf.driver.failure_policy import protection_line
from raytf.driver.listeners import Listeners
from raytf.driver.progress import Progress
from raytf.driver.run_dir_hold import hold_run_dir
from raytf.group.actors import credential_env, worker_env
from raytf.group.autoscaler import adds_machines
from raytf.group.cluster import ensure_ray
from raytf.group.feasibility import check_cluster, check_data_room
from raytf.group.pool import WorkerPool
from raytf.group.shared_storage import (
    SharedStorageCheck,
    autoscaled_error,
    not_shared_error,
    unshared_nodes,
)
from raytf.group.storage_access import NodeAccessCheck
from raytf.group.worker_group import WorkerGroup
from raytf.rundir.storage import check_storage, is_local
from raytf.settings import Settings

logger = logging.getLogger("raytf")


@dataclass(frozen=True)
class RunSpec:
    """What one run trains and how: the user's loop, its config, the run's configs, data."""

    fn: Callable[..., Any]
    config: dict[str, Any]
    scaling: ScalingConfig
    run_config: RunConfig
    datasets: dict[str, Any] = field(default_factory=dict)


def _configure_logging(settings: Settings, run_config: RunConfig) -> None:
    """RAYTF_LOG_LEVEL, else ``LoggingConfig.log_level``, for raytf's lines on the driver;
    with neither, the user's own logging set-up is left alone."""
    level = settings.log_level or run_config.logging_config.log_level
    if level:
        if not logging.getLogger().handlers:
            logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s %(message)s")
        logger.setLevel(level.upper())


def run_env(run_config: RunConfig) -> dict[str, str]:
    """The run's own variables for its workers (beside the forwarded ones): its logging
    settings, and the driver's credentials where the run asks for them."""
    env = run_config.logging_config.worker_env()
    if run_config.forward_credentials:
        env.update(credential_env())
    return env


def runner_for(spec: RunSpec) -> Any:
    """What runs ``spec``, holding its run directory's lease from now on: a ``Controller``
    on the cluster, or a ``LocalRun`` in this process (``num_workers=0``). Both have
    ``writer`` (the run directory's ``StateWriter``) and ``run()``."""
    if spec.scaling.is_local:
        from raytf.local_mode import LocalRun

        return LocalRun(spec.fn, spec.config, spec.scaling, spec.run_config, spec.datasets)
    return make_controller(spec)


def make_controller(
    spec: RunSpec,
    *,
    what: str = "run",
    listeners: Listeners | None = None,
    placement_group: Any = None,
    pool_cls: type = WorkerPool,
    group_cls: type = WorkerGroup,
) -> Controller:
    """Join or start Ray, rule out a cluster that can never hold the group, make the driver."""
    settings = Settings.from_env()
    run_config = spec.run_config
    _configure_logging(settings, run_config)
    check_storage(run_config.storage_path, run_config.run_dir)  # before Ray: a typo fails fast
    ensure_ray(settings=settings)
    ray_lines.install()  # Ray's teardown notes off the screen (kept in Ray's own logs)
    check_cluster(spec.scaling)
    check_data_room(spec.scaling, list(spec.datasets))
    local = is_local(run_config.run_dir)
    if local and not settings.storage_shared and adds_machines():
        raise autoscaled_error(run_config.storage_path)
    if local:
        unshared = unshared_nodes(run_config.run_dir, spec.scaling.worker_resources())
        if unshared:
            raise not_shared_error(run_config.storage_path, unshared)
        check = SharedStorageCheck(run_config.run_dir, run_config.storage_path)
        pool_cls = functools.partial(pool_cls, storage_check=check)
    elif not run_config.run_dir.startswith("memory://"):  # a store every node shares
        env = {**worker_env(), **run_env(run_config)}  # what the pool gives its workers
        check = NodeAccessCheck(run_config.run_dir, env)
        pool_cls = functools.partial(pool_cls, storage_check=check)
    progress = Progress(
        verbose=run_config.verbose, interval_s=run_config.progress_interval_s, stream=sys.stderr
    )
    progress.message(f"{what} {run_config.name} in {run_config.run_dir}")
    progress.message(protection_line(run_config))
    data = DataFeed(spec.datasets, spec.scaling.global_batch_size)
    data.check(spec.scaling.max_workers, progress.message)
    data.fetch_schemas()
    writer = hold_run_dir(run_config, settings, progress.message)  # last: nothing fails after
    return Controller(
        ray.put(spec.fn),
        spec.config,
        spec.scaling,
        run_config,
        progress,
        data=data,
        listeners=listeners,
        placement_group=placement_group,
        pool_cls=functools.partial(pool_cls, env=run_env(run_config)),
        group_cls=group_cls,
        settings=settings,
        writer=writer,
    )
