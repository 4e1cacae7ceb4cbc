"""The slots and spare processes a run keeps across attempts.

The slots (placement groups, see ``slots.py``) are made once and kept: a
restart does not give the cluster a chance to hand the room to someone else;
a slot on a node proven gone is reserved again off it at once. Standbys are
zero-resource actors with TensorFlow imported, pinned to the active slots'
nodes (not bundles: a group reserved again keeps them, each handed to the
slot now on its node); a restart promotes them instead of paying process
start and TF import again, and makes new ones once training is back. An
elastic group restarts at once on the slots with warm processes, when they
are enough, and grows by first starting a *spare* (a full actor) in each new
slot: growing costs a restart, not an import.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raytf.config import ScalingConfig
from raytf.errors import WorkerSetupError
from raytf.group import kept
from raytf.group.actors import actor_options, bundle_gpu_ids, kill_actor, worker_env
from raytf.group.cluster import alive_node_ids, refusing_nodes
from raytf.group.elastic import WorldSize, choose_world_size
from raytf.group.reserve import Reserve
from raytf.group.shipping import worker_runtime_env
from raytf.group.slots import make_slots
from raytf.settings import Settings
from raytf.worker.actor import RaytfWorker

logger = logging.getLogger("raytf")

# How long a standby that answered before may take to answer again before it is judged
# gone (a node that died: its ping hangs until Ray notices). A false "gone" costs a new
# actor (TensorFlow's import, 5-7 s); in CI an idle standby took over 2 s to answer while
# the attempt's killed actors were being torn down on the 2-core node.
STANDBY_PING_TIMEOUT_S = 5.0


class WorkerPool:
    def __init__(
        self,
        scaling: ScalingConfig,
        *,
        run_name: str,
        placement_group=None,
        env: dict[str, str] | None = None,
        storage_check: Callable[[set[str]], None] | None = None,
    ):
        self.scaling = scaling
        # A local run directory: checked on the nodes each attempt's workers are placed on
        # (raytf.group.shared_storage); raises ConfigError where one does not share it.
        self.storage_check = storage_check
        self.env = dict(env or {})  # the run's own worker variables (LoggingConfig)
        self.run_name = run_name
        self.bundle = scaling.worker_resources()
        # A Tune trial passes its own placement group; otherwise the pool reserves its slots.
        self.slots = make_slots(scaling, run_name, placement_group)
        # A fixed group's own reservation keeps a warm process off its nodes for a lost
        # node's rank (raytf.group.reserve); an elastic group shrinks, Tune's is Tune's.
        fixed = placement_group is None and not scaling.is_elastic
        self.reserve = Reserve(self._standby_on) if fixed else None
        self.active: list[int] = []  # slot of each rank
        self.standbys: dict[int, object] = {}  # slot -> zero-resource standby
        self._standby_nodes: dict[int, str] = {}  # slot -> the node its standby is pinned to
        self.spares: dict[int, tuple[object, object]] = {}  # slot -> (full actor, warm ref)
        self.bundle_gpu_ids: dict[int, list[str]] = {}  # slot -> GPUs Ray gave its bundle
        self._dead_nodes: set[str] = set()  # placed slots' nodes that stopped answering
        self._first_ping: dict[int, object] = {}  # slot -> its standby's or spare's first ping
        self._slot_nodes: dict[int, str] = {}  # where the active slots were placed
        self.lost_nodes: set[str] = set()  # nodes of the last attempt found dead
        self._actor_cls = ray.remote(RaytfWorker)
        self._any_kept = False  # processes kept from earlier runs exist (raytf.group.kept)
        self._kept_key = ""  # this run's environment as kept processes are matched by
        # The workers' runtime_env option (raytf.group.shipping): the driver's raytf in
        # py_modules, or None (the job's as it is). Made again at each attempt: that
        # pins the package in Ray's storage for the attempt's actors.
        self._runtime_env: dict | None = None
        self._runtime_env_made = False

    @property
    def world_size(self) -> int:
        return len(self.active)

    def place(self, timeout_s: float, on_wait: Callable[[str, float], None]) -> WorldSize:
        """Reserve (or find again) the slots for the next attempt; sets ``active``."""
        # A node killed seconds ago reads alive: a refusing raylet proves it gone, its
        # standbys with it. A standby or spare that does not answer marks its node dead
        # for this placement only (it may have died alone).
        placed = self.slots.placed()
        suspects = set(self._slot_nodes.values()) & set(placed.values())
        reserve = {self.reserve.node} - {None} if self.reserve is not None else set()
        refusing = refusing_nodes(suspects | set(self._standby_nodes.values()) | reserve)
        alive = alive_node_ids()
        known = {*self._slot_nodes.values(), *self._standby_nodes.values(), *reserve}
        gone = refusing | {n for n in known if n not in alive}
        dead = self._ping_all(gone, placed)
        self._dead_nodes = {placed[s] for s in dead if s in placed} | refusing
        self.lost_nodes = {self._slot_nodes[s] for s in dead if s in self._slot_nodes}
        self.lost_nodes |= gone - reserve | (set(self._slot_nodes.values()) & self._dead_nodes)
        restart = bool(self._slot_nodes)
        usable = self._warm_first if restart else self._usable
        toward = self.reserve.warm_node(gone) if self.reserve is not None and gone else None
        self.active, size = self.slots.place(
            timeout_s, on_wait, usable, gone, settle=restart, toward=toward
        )
        placed, before = self.slots.placed(), self._slot_nodes
        self._slot_nodes = {s: placed[s] for s in self.active if s in placed}
        moved = {s for s, n in self._slot_nodes.items() if before.get(s, n) != n}  # by Ray
        self._follow_moved_slots(self.slots.moved | moved)
        if self.storage_check is not None:
            self.storage_check(set(self._slot_nodes.values()))
        return size

    def _usable(self, placed: dict[int, str]) -> list[int]:
        """Placed slots on nodes that answer; those with a warm process first."""
        ok = [s for s, node in placed.items() if node not in self._dead_nodes]
        return sorted(ok, key=lambda s: (s not in self.standbys and s not in self.spares, s))

    def _warm(self, slot: int) -> bool:  # a standby or spare that has answered
        return (slot in self.standbys or slot in self.spares) and self._answered(slot)

    def _warm_first(self, placed: dict[int, str]) -> list[int]:
        """At a restart: the usable slots with a warm process, if they make a world size,
        else every usable one. A cold slot (a lost node's, placed anew) would hold the
        restart up for a TensorFlow import: it joins later, through growth."""
        usable = self._usable(placed)
        warm = [s for s in usable if self._warm(s)]
        return warm if choose_world_size(self.scaling, len(warm)) is not None else usable

    def _follow_moved_slots(self, moved: set[int]) -> None:
        """Slots reserved anew (off a gone node) hold new bundles: the GPUs Ray gave the
        old ones no longer hold, a spare in an old bundle went with it, and a standby
        (pinned to a node) goes to whichever moved slot is now on its node, else away."""
        if not moved:
            return
        by_node: dict[str | None, list[int]] = {}
        for slot in [s for s in self.standbys if s in moved]:
            by_node.setdefault(self._standby_nodes.get(slot), []).append(slot)
        standbys, nodes, pings = {}, {}, {}
        for slot in sorted(moved):
            self.bundle_gpu_ids.pop(slot, None)
            if slot in self.spares:
                kill_actor(self.spares.pop(slot)[0])
            node = self._slot_nodes.get(slot) if slot in self.active else None
            here = by_node.get(node) if node is not None else None
            if here:
                old = here.pop()
                standbys[slot] = self.standbys.pop(old)
                nodes[slot] = self._standby_nodes.pop(old)
                pings[slot] = self._first_ping.pop(old, None)
            elif node is not None and self.reserve is not None and node == self.reserve.node:
                standbys[slot], pings[slot] = self.reserve.take()  # a lost rank's slot
                nodes[slot] = node
        for slot in [s for s in self.standbys if s in moved]:  # on no slot's node now
            kill_actor(self.standbys.pop(slot))
            self._standby_nodes.pop(slot, None)
            self._first_ping.pop(slot, None)
        self.standbys.update(standbys)
        self._standby_nodes.update(nodes)
        self._first_ping.update({s: p for s, p in pings.items() if p is not None})

    def _ping_all(self, gone: set[str], placed: dict[int, str]) -> list[int]:
        """Slots whose standby or spare stopped answering or is on a node ``gone``
        (not asked: the answer would take seconds to fail); those processes are killed.

        Only processes that have answered before are judged: one still starting
        (process start and Ray's worker set-up take seconds on a busy node) is
        slow, not dead, and is left to Ray.
        """
        actors = {**self.standbys, **{s: a for s, (a, _) in self.spares.items()}}
        nodes = {s: placed.get(s) for s in self.spares}  # a spare holds its slot's bundle
        nodes.update({s: self._standby_nodes.get(s) for s in self.standbys})
        lost = [s for s in actors if nodes.get(s) in gone]
        for slot in lost:
            kill_actor(actors.pop(slot))
            self.standbys.pop(slot, None)
            self.spares.pop(slot, None)
        actors = {s: a for s, a in actors.items() if self._answered(s)}
        if not actors:
            return lost
        refs = {s: a.ping.remote() for s, a in actors.items()}
        ray.wait(list(refs.values()), num_returns=len(refs), timeout=STANDBY_PING_TIMEOUT_S)
        dead = []
        for slot, ref in refs.items():
            try:
                ray.get(ref, timeout=0)
            except Exception as exc:  # noqa: BLE001 - dead or unreachable: replace it
                logger.warning(
                    "raytf: the standby of slot %d did not answer within %.0f s (%s): replaced",
                    slot,
                    STANDBY_PING_TIMEOUT_S,
                    type(exc).__name__,
                )
                dead.append(slot)
                kill_actor(actors[slot])
                self.standbys.pop(slot, None)
                self.spares.pop(slot, None)
        return lost + dead

    def _answered(self, slot: int) -> bool:
        """Has the slot's standby or spare ever answered (or died: that is an answer too)?"""
        ref = self._first_ping.get(slot)
        return ref is not None and bool(ray.wait([ref], timeout=0)[0])

    def actors_for_ranks(self) -> list[tuple[object, bool]]:
        """One actor per rank: a spare or live standby promoted in place, else a new actor.

        Returns (actor, promoted) pairs.
        """
        n = self.world_size
        out: list[tuple[object, bool]] = []
        promotions = []
        # One look per attempt, not one per slot; the run's environment, as kept's key.
        self._make_runtime_env()
        self._kept_key = kept.env_key(self._env(), self._runtime_env)
        self._any_kept = kept.any_kept(self._kept_key)
        for rank, slot in enumerate(self.active):
            spare = self.spares.pop(slot, None)
            standby = self.standbys.pop(slot, None)
            if not self._answered(slot):
                # Never answered: still starting (a new actor costs a few seconds
                # more), or on a node that died (a promotion would hang until Ray
                # notices). Only the first is cheap to be wrong about.
                for unsure in (spare[0] if spare else None, standby):
                    if unsure is not None:
                        logger.warning(
                            "raytf: the standby of slot %d has not answered yet: a new worker "
                            "takes rank %d",
                            slot,
                            rank,
                        )
                        kill_actor(unsure)
                spare = standby = None
            gpu_ids = self.bundle_gpu_ids.get(slot)
            if spare is not None:
                # A spare holds its bundle's resources itself: it keeps the GPUs Ray gave it.
                promotions.append(spare[0].promote.remote(rank, n, self.scaling.use_gpu, None))
                out.append((spare[0], True))
                if standby is not None:
                    kill_actor(standby)
                continue
            if standby is not None and self.scaling.use_gpu and gpu_ids is None:
                # A bundle reserved anew: ask Ray which GPUs it holds.
                gpu_ids = bundle_gpu_ids(self.slots.strategy(slot), self.scaling.gpus_per_worker)
            if standby is not None:
                promotions.append(
                    standby.promote.remote(rank, n, self.scaling.use_gpu, gpu_ids or [])
                )
                out.append((standby, True))
                continue
            claimed = self._claim_kept(slot, gpu_ids)
            if claimed is not None:
                actor, gpu_ids = claimed
                env = self._env()  # this run's, not that of whoever started the process
                promotions.append(actor.promote.remote(rank, n, self.scaling.use_gpu, gpu_ids, env))
                out.append((actor, True))
                continue
            out.append((self._full_actor(slot, rank, n), False))
        try:
            # Workers run calls on three threads, in no fixed order: a promotion must be
            # complete before the next call (reserve) asks the worker for its rank.
            ray.get(promotions)
        except RayActorError as exc:
            for actor, _ in out:
                kill_actor(actor)
            raise WorkerSetupError(f"a standby died while being promoted: {exc}") from None
        return out

    def _claim_kept(self, slot: int, gpu_ids: list[str] | None) -> tuple[object, list] | None:
        """A process kept from an earlier run on the slot's node, and the bundle's GPUs."""
        node = self._slot_nodes.get(slot)
        actor = kept.claim(node, self._kept_key) if node is not None and self._any_kept else None
        if actor is None:
            return None
        if self.scaling.use_gpu and gpu_ids is None:
            gpu_ids = bundle_gpu_ids(self.slots.strategy(slot), self.scaling.gpus_per_worker)
        return actor, gpu_ids or []

    def _full_actor(self, slot: int, rank: int | None, n: int):
        return self._actor_cls.options(
            **actor_options(self.bundle),
            max_restarts=0,
            max_concurrency=3,
            scheduling_strategy=self.slots.strategy(slot),
            **self._runtime_env_option(),
        ).remote(rank, n, self.scaling.use_gpu, self.scaling.gpus_per_worker, self._env())

    def _env(self) -> dict[str, str]:
        return {**worker_env(), **self.env}

    def _make_runtime_env(self) -> None:
        self._runtime_env = worker_runtime_env()
        self._runtime_env_made = True

    def _runtime_env_option(self) -> dict:
        """``runtime_env=...`` for an actor's options, or nothing (the job's, inherited)."""
        if not self._runtime_env_made:
            self._make_runtime_env()
        return {} if self._runtime_env is None else {"runtime_env": self._runtime_env}

    def remember_gpus(self, infos: list) -> None:
        """The GPUs each active slot's bundle holds, for standbys promoted there later."""
        for info in infos:
            if info.rank < len(self.active):
                self.bundle_gpu_ids[self.active[info.rank]] = list(info.gpu_ids)

    def add_standbys(self) -> None:
        """A zero-resource spare per active slot, pinned to its node; each starts
        importing TF at once."""
        for slot in self.active:
            node = self._slot_nodes.get(slot)
            if slot in self.standbys or node is None:
                continue
            self.standbys[slot] = self._standby_on(node)
            self._standby_nodes[slot] = node
            self._first_ping[slot] = self.standbys[slot].ping.remote()
        self.keep_reserve()

    def keep_reserve(self) -> None:
        """A fixed group's reserve, where a node has room (raytf.group.reserve); the driver
        calls this each round once standbys are due: it looks every ``AGAIN_S`` at most."""
        if self.reserve is not None:
            self.reserve.keep(self.bundle, set(self._slot_nodes.values()))

    def _standby_on(self, node: str):
        """A zero-resource worker process pinned to ``node``; it imports TF at once."""
        return self._actor_cls.options(
            num_cpus=0,
            num_gpus=0,
            max_restarts=0,
            max_concurrency=3,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            **self._runtime_env_option(),
        ).remote(None, self.world_size, self.scaling.use_gpu, 0, self._env())

    # -- elastic growth ---------------------------------------------------------
    def growth(self) -> tuple[WorldSize, list[int]] | None:
        """A larger world size the placed slots now allow, and the slots it adds; else None."""
        if not self.scaling.is_elastic:
            return None
        ok = self._usable(self.slots.placed())
        size = choose_world_size(self.scaling, len(ok))
        if size is None or size.workers <= self.world_size:
            return None
        new = sorted(s for s in ok if s not in self.active)
        return size, new[: size.workers - self.world_size]

    def warm_spares(self, slots: list[int]) -> bool:
        """Start a spare in each slot (once); True when all of them have TF imported."""
        refs = []
        for slot in slots:
            if slot not in self.spares:
                actor = self._full_actor(slot, None, self.scaling.max_workers)
                self.spares[slot] = (actor, actor.warm.remote())
                self._first_ping[slot] = actor.ping.remote()
            refs.append(self.spares[slot][1])
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        return len(done) == len(refs)

    def evict(self, node_ids: set[str]) -> list[int]:
        """Give up the slots on these (draining) nodes, and the processes in them."""
        slots = self.slots.evict(node_ids)
        if self.reserve is not None and self.reserve.node in node_ids:
            self.reserve.drop()
        for slot in slots:
            if slot in self.standbys:
                kill_actor(self.standbys.pop(slot))
            if slot in self.spares:
                kill_actor(self.spares.pop(slot)[0])
            self.bundle_gpu_ids.pop(slot, None)
        if slots and not self.scaling.is_elastic:
            # One placement group for all: every bundle moves (the standbys, pinned to
            # their nodes, stay for the slots that land there again).
            self.bundle_gpu_ids = {}
        return slots

    def close(self) -> None:
        for actor in [*self.standbys.values(), *(a for a, _ in self.spares.values())]:
            kill_actor(actor)
        self.standbys, self.spares = {}, {}
        if self.reserve is not None:
            self.reserve.drop()
        self.slots.close()
        settings = Settings.from_env()
        if settings.keep_processes > 0:  # the next run's warm start (raytf.group.kept)
            nodes = sorted(set(self._slot_nodes.values()))
            kept.start(
                settings.keep_processes,
                settings.keep_idle_s,
                nodes or None,
                self._env(),
                self._runtime_env_option().get("runtime_env"),
            )
