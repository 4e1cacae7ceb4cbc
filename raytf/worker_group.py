"""A placement group and one RaytfWorker actor per rank, started and ended as a unit.

A group lives exactly as long as one MWMS: a strategy cannot be re-made in a
live process, so any failure (or a port clash at start-up) ends the whole group
and the driver starts a new one, new processes and new ports included.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from raytf.config import ScalingConfig
from raytf.devices import collective_implementation
from raytf.errors import (
    PlacementTimeoutError,
    PortClashError,
    WorkerDiedError,
    WorkerSetupError,
)
from raytf.tf_config import tf_config_json
from raytf.worker import RaytfWorker, WorkerInfo, WorkerPoll

logger = logging.getLogger("raytf")

# Environment each worker starts with unless the user's environment says otherwise.
WORKER_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "1",  # TF's C++ INFO lines drown the user's output
    "PYTHONUNBUFFERED": "1",  # so forwarded output keeps pace with training
}
POLL_TIMEOUT_S = float(os.environ.get("RAYTF_POLL_TIMEOUT_S", "10"))


def _actor_options(bundle: dict[str, float]) -> dict:
    custom = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU", "memory")}
    options = {"num_cpus": bundle.get("CPU", 0), "num_gpus": bundle.get("GPU", 0)}
    if custom:
        options["resources"] = custom
    if "memory" in bundle:
        options["memory"] = bundle["memory"]
    return options


def bundle_label(bundle: dict[str, float], count: int) -> str:
    inner = ", ".join(f"{k}: {v:g}" for k, v in sorted(bundle.items()))
    return f"{count} x {{{inner}}}"


class WorkerGroup:
    """Owns one attempt's placement group and actors; ``shutdown`` leaves nothing behind."""

    def __init__(self, scaling: ScalingConfig, *, run_name: str, attempt: int):
        self.scaling = scaling
        self.run_name = run_name
        self.attempt = attempt
        self.bundle = scaling.worker_resources()
        self.pg = None
        self.actors: list = []
        self.infos: list[WorkerInfo] = []

    # -- start-up ---------------------------------------------------------
    def place(self, timeout_s: float, on_wait: Callable[[str, float], None]) -> None:
        """Reserve every worker's resources at once, so no worker starts alone."""
        n = self.scaling.num_workers
        self.pg = placement_group(
            [dict(self.bundle) for _ in range(n)],
            strategy=self.scaling.placement_strategy,
            name=f"raytf:{self.run_name}:{self.attempt}",
        )
        ready = self.pg.ready()
        start = time.monotonic()
        label = bundle_label(self.bundle, n)
        while True:
            done, _ = ray.wait([ready], timeout=1.0)
            if done:
                return
            waited = time.monotonic() - start
            if waited >= timeout_s:
                raise PlacementTimeoutError(
                    f"waited {waited:.0f} s for {label} and the cluster never had room: "
                    "other work holds the resources or the autoscaler added no nodes "
                    "(RunConfig.placement_timeout_s sets the wait)"
                )
            on_wait(f"waiting for {label}", waited)

    def start_actors(self) -> None:
        n = self.scaling.num_workers
        gpus = self.scaling.gpus_per_worker
        options = _actor_options(self.bundle)
        actor_cls = ray.remote(RaytfWorker)
        self.actors = [
            actor_cls.options(
                **options,
                max_restarts=0,
                max_concurrency=2,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=self.pg, placement_group_bundle_index=rank
                ),
            ).remote(rank, n, self.scaling.use_gpu, gpus, WORKER_ENV)
            for rank in range(n)
        ]

    def setup(self, timeout_s: float) -> int:
        """Wire the actors into one MWMS. Raises PortClashError or WorkerSetupError."""
        self.infos = self._get_all([a.reserve.remote() for a in self.actors], timeout_s, "start")
        addresses = [(info.node_ip, info.port) for info in self.infos]
        impl = collective_implementation(self.scaling.use_gpu)
        refs = [
            actor.setup.remote(tf_config_json(addresses, rank), impl)
            for rank, actor in enumerate(self.actors)
        ]
        replicas = self._get_all(refs, timeout_s, "create the strategy")
        return replicas[0]

    def _get_all(self, refs: list, timeout_s: float, what: str) -> list:
        deadline = time.monotonic() + timeout_s
        pending = list(refs)
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                ranks = sorted(refs.index(r) for r in pending)
                raise WorkerSetupError(
                    f"ranks {ranks} did not {what} within {timeout_s:.0f} s "
                    "(RunConfig.setup_timeout_s)"
                )
            done, pending = ray.wait(pending, timeout=min(remaining, 1.0))
            for ref in done:
                self._raise_setup_error(ref, refs.index(ref), what)
        return ray.get(list(refs))

    @staticmethod
    def _raise_setup_error(ref, rank: int, what: str) -> None:
        try:
            ray.get(ref)
        except RayTaskError as exc:
            cause = exc.as_instanceof_cause()
            if isinstance(cause, PortClashError):
                raise PortClashError(str(cause)) from None
            raise WorkerSetupError(f"rank {rank} could not {what}: {exc}") from None
        except RayActorError as exc:
            raise WorkerSetupError(f"rank {rank} died while trying to {what}: {exc}") from None

    # -- running ------------------------------------------------------------
    def run(self, fn_ref, config: dict, run_dir: str) -> None:
        local_ranks = self._local_ranks()
        ray.get(
            [
                actor.start.remote(fn_ref, config, run_dir, local_ranks[rank])
                for rank, actor in enumerate(self.actors)
            ]
        )

    def _local_ranks(self) -> list[int]:
        seen: dict[str, int] = {}
        out = []
        for info in self.infos:
            out.append(seen.get(info.node_id, 0))
            seen[info.node_id] = out[-1] + 1
        return out

    def poll(self) -> list[WorkerPoll | WorkerDiedError | None]:
        """One answer per rank: a WorkerPoll, WorkerDiedError, or None if it did not answer."""
        refs = [actor.poll.remote() for actor in self.actors]
        ray.wait(refs, num_returns=len(refs), timeout=POLL_TIMEOUT_S)
        out: list[WorkerPoll | WorkerDiedError | None] = []
        for rank, ref in enumerate(refs):
            try:
                out.append(ray.get(ref, timeout=0))
            except GetTimeoutError:
                out.append(None)
            except RayActorError as exc:
                out.append(WorkerDiedError(rank, _first_line(exc)))
        return out

    # -- tear-down ----------------------------------------------------------
    def shutdown(self) -> None:
        """Kill every actor (and with it its TF server), then free the placement group."""
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception as exc:  # noqa: BLE001 - already gone is fine
                logger.debug("kill failed: %s", exc)
        self.actors = []
        if self.pg is not None:
            try:
                remove_placement_group(self.pg)
            except Exception as exc:  # noqa: BLE001
                logger.debug("remove_placement_group failed: %s", exc)
            self.pg = None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
