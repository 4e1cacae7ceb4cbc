"""The resources and spare processes a run keeps across attempts.

The placement group is made once and kept: a restart does not give the
cluster a chance to hand the room to someone else, and a bundle lost with its
node is rescheduled by Ray on its own. Standbys are zero-resource actors in
the same bundles with TensorFlow already imported; a restart promotes them
instead of paying process start and TF import again, then makes new standbys
once training is back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import ray
from ray.exceptions import RayActorError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from raytf import autoscaling
from raytf.config import ScalingConfig
from raytf.errors import PlacementTimeoutError, WorkerSetupError
from raytf.worker import RaytfWorker

logger = logging.getLogger("raytf")

# Environment each worker starts with unless the user's environment says otherwise.
WORKER_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "1",  # TF's C++ INFO lines drown the user's output
    "PYTHONUNBUFFERED": "1",  # so forwarded output keeps pace with training
}
STANDBY_PING_TIMEOUT_S = 2.0


def actor_options(bundle: dict[str, float]) -> dict:
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


class WorkerPool:
    def __init__(self, scaling: ScalingConfig, *, run_name: str):
        self.scaling = scaling
        self.run_name = run_name
        self.bundle = scaling.worker_resources()
        self.pg = None
        self.standbys: dict[int, object] = {}  # bundle index -> standby actor
        self.bundle_gpu_ids: dict[int, list[str]] = {}
        self._actor_cls = ray.remote(RaytfWorker)

    def place(self, timeout_s: float, on_wait: Callable[[str, float], None]) -> None:
        """Reserve every worker's resources at once (again after a node loss), or time out."""
        n = self.scaling.num_workers
        if self.pg is None:
            self.pg = placement_group(
                [dict(self.bundle) for _ in range(n)],
                strategy=self.scaling.placement_strategy,
                name=f"raytf:{self.run_name}",
            )
        ready = self.pg.ready()
        start = time.monotonic()
        label = bundle_label(self.bundle, n)
        asked = requested = False
        while True:
            done, _ = ray.wait([ready], timeout=1.0)
            if done:
                if requested:
                    autoscaling.request([])  # placed: let idle nodes go when the run ends
                return
            if not asked:
                # Not placed within a second: ask the autoscaler, if one can add nodes.
                asked = True
                if autoscaling.autoscaler_running():
                    autoscaling.request([dict(self.bundle) for _ in range(n)])
                    requested = True
                    label += " (asked the autoscaler)"
            waited = time.monotonic() - start
            if waited >= timeout_s:
                if requested:
                    autoscaling.request([])
                raise PlacementTimeoutError(
                    f"waited {waited:.0f} s for {label} and the cluster never had room: "
                    "other work holds the resources or the autoscaler added no nodes "
                    "(RunConfig.placement_timeout_s sets the wait)"
                )
            on_wait(f"waiting for {label}", waited)

    def _strategy(self, index: int) -> PlacementGroupSchedulingStrategy:
        return PlacementGroupSchedulingStrategy(
            placement_group=self.pg, placement_group_bundle_index=index
        )

    def actors_for_ranks(self) -> list[tuple[object, bool]]:
        """One actor per rank: a live standby promoted in place, else a new full actor.

        Returns (actor, promoted) pairs. A standby that does not answer a ping
        (its node died with it) is replaced by a new actor.
        """
        n = self.scaling.num_workers
        alive = self._live_standbys()
        out: list[tuple[object, bool]] = []
        promotions = []
        for rank in range(n):
            standby = alive.pop(rank, None)
            gpu_ids = self.bundle_gpu_ids.get(rank)
            if standby is not None and (gpu_ids is not None or not self.scaling.use_gpu):
                promotions.append(
                    standby.promote.remote(rank, n, self.scaling.use_gpu, gpu_ids or [])
                )
                out.append((standby, True))
                continue
            if standby is not None:
                kill_actor(standby)
            actor = self._actor_cls.options(
                **actor_options(self.bundle),
                max_restarts=0,
                max_concurrency=2,
                scheduling_strategy=self._strategy(rank),
            ).remote(rank, n, self.scaling.use_gpu, self.scaling.gpus_per_worker, WORKER_ENV)
            out.append((actor, False))
        self.standbys = {}
        try:
            # Workers run calls on two threads, in no fixed order: a promotion must be
            # complete before the next call (reserve) asks the worker for its rank.
            ray.get(promotions)
        except RayActorError as exc:
            for actor, _ in out:
                kill_actor(actor)
            raise WorkerSetupError(f"a standby died while being promoted: {exc}") from None
        return out

    def _live_standbys(self) -> dict[int, object]:
        if not self.standbys:
            return {}
        refs = {i: a.ping.remote() for i, a in self.standbys.items()}
        ray.wait(list(refs.values()), num_returns=len(refs), timeout=STANDBY_PING_TIMEOUT_S)
        alive = {}
        for i, ref in refs.items():
            try:
                ray.get(ref, timeout=0)
                alive[i] = self.standbys[i]
            except Exception:  # noqa: BLE001 - dead or unreachable: replace it
                kill_actor(self.standbys[i])
        return alive

    def add_standbys(self) -> None:
        """A zero-resource spare per bundle; each starts importing TF at once."""
        for index in range(self.scaling.num_workers):
            if index in self.standbys:
                continue
            self.standbys[index] = self._actor_cls.options(
                num_cpus=0,
                num_gpus=0,
                max_restarts=0,
                max_concurrency=2,
                scheduling_strategy=self._strategy(index),
            ).remote(None, self.scaling.num_workers, self.scaling.use_gpu, 0, WORKER_ENV)

    def close(self) -> None:
        for actor in self.standbys.values():
            kill_actor(actor)
        self.standbys = {}
        if self.pg is not None:
            try:
                remove_placement_group(self.pg)
            except Exception as exc:  # noqa: BLE001
                logger.debug("remove_placement_group failed: %s", exc)
            self.pg = None


def kill_actor(actor) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception as exc:  # noqa: BLE001 - already gone is fine
        logger.debug("kill failed: %s", exc)
