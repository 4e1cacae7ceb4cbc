"""Simulated ranks: a thousand workers behind the interfaces the driver calls, on 2 cores.

A real rank is a process with TensorFlow (``raytf.worker.actor.RaytfWorker``);
past about 64 of them this machine runs out of memory and CPU. What grows with
the number of ranks, though, is the driver's side, and the driver only ever
talks to a rank through its actor handle's methods (``reserve``, ``setup``,
``start``, ``poll``, ``request_checkpoint``, ``emergency_checkpoint``,
``command``, ``ping``). So here ``SimHost`` actors serve many ranks each, and
a ``RankHandle`` per rank looks to the driver like that rank's actor handle:
``handle.poll.remote()`` is one Ray actor call, as it is in production.

Production code: the controller and its state machine, the worker group
(placement, set-up, TF_CONFIG, polling, silent ranks, emergency checkpoints,
tear-down), the pool's placement group of one bundle per rank, the watchdog,
the checkpoint commits (every rank writes its part's file into its own
staging folder, the driver commits them as in a real run), ``state.json``,
``metrics.jsonl`` and the progress display. Stand-ins: the rank's body (a
step is a sleep, no TensorFlow, no MWMS, no ports held), the processes
(``RANKS_PER_HOST`` ranks per Ray actor, so a death is a rank's calls failing as Ray's do
for a dead actor), and the standbys (a fresh set of hosts, started once
training runs, as the pool starts its standbys).
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import threading
import time

import ray
from ray.exceptions import RayActorError

from raytf import compat
from raytf.checkpoint.layout import CKPT_DIR, parse_step_dirname, stage_name, staged_dir
from raytf.group.pool import WorkerPool
from raytf.group.worker_group import WorkerGroup
from raytf.messages import (
    FINISHED,
    IDLE,
    RUNNING,
    CheckpointPart,
    Report,
    SetupReply,
    WorkerInfo,
    WorkerPoll,
)
from raytf.rundir.storage import Storage

RANKS_PER_HOST = 64


class _Rank:
    """One simulated rank's state: what a ``RaytfWorker`` would report of itself."""

    def __init__(self, rank: int):
        self.rank = rank
        self.step = 0
        self.state = IDLE
        self.reports: list[Report] = []
        self.parts: list[CheckpointPart] = []
        self.stamps = {"actor_ready": time.time()}
        self.startup_sent = False
        self.dead = False
        self.news = threading.Event()  # as the worker's buffer's: a held poll answers now
        self.ended_at: float | None = None


class SimHost:
    """Serves a slice of the ranks; one thread steps them all, as one collective would."""

    def __init__(self, ranks: list[int], world_size: int):
        self.world_size = world_size
        self.ranks = {r: _Rank(r) for r in ranks}
        self.lock = threading.Lock()
        ctx = ray.get_runtime_context()
        self.node_id = ctx.get_node_id()
        self.ip = ray.util.get_node_ip_address()
        self.config: dict = {}
        self.run_dir = ""
        self.every: int | None = None
        self.attempt = 1
        self.thread: threading.Thread | None = None

    def ping(self) -> int:
        return os.getpid()

    def call(self, rank: int, method: str, args: tuple, kwargs: dict):
        r = self.ranks[rank]
        if r.dead:  # what the driver's ray.get raises for a dead actor's call
            raise RayActorError()
        return getattr(self, f"_{method}")(r, *args, **kwargs)

    # -- the methods of RaytfWorker the driver calls ---------------------------
    def _ping(self, r: _Rank) -> int:
        return os.getpid()

    def _promote(self, r: _Rank, *_args) -> None:
        pass

    def _reserve(self, r: _Rank) -> WorkerInfo:
        return WorkerInfo(
            rank=r.rank,
            node_ip=self.ip,
            node_id=self.node_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            port=20000 + r.rank,  # never bound: no TF server here
            gpu_ids=(),
        )

    def _setup(self, r: _Rank, tf_config: str, communication: str) -> SetupReply:
        r.stamps["strategy_created"] = time.time()
        probes = compat.ProbeReport(frozenset(), ())
        return SetupReply(self.world_size, probes, compat.source_digest())

    def _start(self, r: _Rank, fn, config, run_dir, local_rank, ckpt, shards) -> None:
        with self.lock:
            r.state = RUNNING
            r.step = parse_step_dirname(os.path.basename(ckpt.restore_url or "")) or 0
            self.config, self.run_dir, self.every = dict(config), run_dir, ckpt.every_steps
            self.attempt = ckpt.attempt
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, daemon=True)
                self.thread.start()

    def _poll(self, r: _Rank, hold_s: float = 0.0) -> WorkerPoll:
        if hold_s > 0 and r.state != FINISHED:
            r.news.wait(hold_s)
        if r.dead:  # as Ray fails a dead actor's outstanding call at once
            raise RayActorError()
        r.news.clear()
        with self.lock:
            reports, r.reports = r.reports, []
            parts, r.parts = r.parts, []
            startup = None
            if "first_step" in r.stamps and not r.startup_sent:
                r.startup_sent, startup = True, dict(r.stamps)
            return WorkerPoll(
                rank=r.rank,
                state=r.state,
                reports=reports,
                parts=parts,
                step=r.step if r.state != IDLE else None,
                startup=startup,
                result={"steps": r.step} if r.state == FINISHED else None,
                ended_at=r.ended_at,
                ticks=r.step,
            )

    def _request_checkpoint(self, r: _Rank, reason: str) -> None:
        pass  # saves come at the plan's interval

    def _emergency_checkpoint(self, r: _Rank, write_tf: bool, committed=None):
        return "a simulated rank holds no state"

    def _command(self, r: _Rank, command) -> None:
        pass

    # -- the ranks' bodies ----------------------------------------------------
    def _loop(self) -> None:
        steps = int(self.config["steps"])
        step_s = float(self.config["step_s"])
        report_every = int(self.config.get("report_every", 100))
        die = (self.config.get("die") or {}) if self.attempt == 1 else {}
        storage = Storage(self.run_dir)
        while True:
            time.sleep(step_s)
            with self.lock:
                live = [r for r in self.ranks.values() if r.state == RUNNING and not r.dead]
                if not live:
                    return
                step = live[0].step + 1
                if die and step > die["step"]:
                    # Every rank stops at the dying one's step (a collective would block),
                    # and the dying one's calls fail from now on.
                    if die["rank"] in self.ranks:
                        self.ranks[die["rank"]].dead = True
                        self.ranks[die["rank"]].news.set()
                    continue
                for r in live:
                    r.step = step
                    r.stamps.setdefault("first_step", time.time())
                    if step % report_every == 0 or step == steps:
                        r.reports.append(
                            Report(r.rank, {"step": step, "loss": 1 / step}, None, time.time())
                        )
                    if step == steps:
                        r.state, r.ended_at = FINISHED, time.time()
                        r.news.set()
            if self.every and step % self.every == 0:
                self._save(storage, live, step)

    def _save(self, storage: Storage, ranks: list[_Rank], step: int) -> None:
        """Each rank's part: one small file in its own staging folder, as a writer's."""
        t0 = time.monotonic()
        parts = []
        for r in ranks:
            name = stage_name(r.rank)
            where = (CKPT_DIR, *staged_dir(storage, step, name))
            files = {f"rank{r.rank}.bin": 64}
            storage.write_atomic(b"\0" * 64, *where, f"rank{r.rank}.bin")
            parts.append((r, CheckpointPart(r.rank, step, files, 0.0, staged=name)))
        took = time.monotonic() - t0
        with self.lock:
            for r, part in parts:
                r.parts.append(dataclasses.replace(part, seconds=took))
                r.news.set()


class _Method:
    def __init__(self, host, rank: int, name: str):
        self.host, self.rank, self.name = host, rank, name

    def remote(self, *args, **kwargs):
        return self.host.call.remote(self.rank, self.name, args, kwargs)


class RankHandle:
    """Looks like a rank's actor handle: ``handle.poll.remote()`` is one actor call."""

    def __init__(self, host, rank: int):
        self._host, self._rank = host, rank

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self._host, self._rank, name)


def start_hosts(world_size: int, per_host: int = RANKS_PER_HOST) -> list:
    """Hosts for ranks 0..world_size-1, ``per_host`` ranks each; zero resources (the
    placement group's bundles hold the ranks' share, as standbys' do)."""
    # Two threads per rank, as each rank's actor has: one may hold a poll (poll_hold_s)
    # while another call (an emergency checkpoint's) is served.
    cls = ray.remote(num_cpus=0, max_concurrency=2 * per_host + 4)(SimHost)
    hosts = []
    for i in range(math.ceil(world_size / per_host)):
        ranks = list(range(i * per_host, min(world_size, (i + 1) * per_host)))
        hosts.append((cls.remote(ranks, world_size), ranks))
    return hosts


class SimPool(WorkerPool):
    """The production pool (its placement group of one bundle per rank, its placement
    and storage checks); the ranks' processes are simulated hosts."""

    def __init__(self, scaling, **kwargs):
        super().__init__(scaling, **kwargs)
        self._hosts: list = []  # this attempt's
        self._next: list = []  # started once training runs: the standbys' stand-in
        self.reserve = None  # no process off the group's nodes: the hosts are simulated

    def _ping_all(self, gone, placed) -> list[int]:
        return []

    def actors_for_ranks(self) -> list[tuple[object, bool]]:
        promoted = bool(self._next)
        hosts, self._next = (self._next or start_hosts(self.world_size)), []
        ray.get([h.ping.remote() for h, _ in hosts])
        self._hosts = hosts
        return [(RankHandle(h, r), promoted) for h, ranks in hosts for r in ranks]

    def add_standbys(self) -> None:
        if not self._next:
            self._next = start_hosts(self.world_size)

    def end_attempt(self) -> None:
        for host, _ in self._hosts:
            ray.kill(host, no_restart=True)
        self._hosts = []

    def close(self) -> None:
        self.end_attempt()
        for host, _ in self._next:
            ray.kill(host, no_restart=True)
        self._next = []
        self.slots.close()


_STARTS: list[dict] = []  # each attempt's phases: seconds from its placement's start


def start_times() -> list[dict]:
    """Each attempt's start-up, seconds after its placement began: the driver's phases
    (``placed``, ``actors_ready``, ``group_created``, ``loops_started``) and
    ``first_step``, its slowest rank's."""
    return list(_STARTS)


class SimGroup(WorkerGroup):
    """The production group; its tear-down also ends the hosts its handles call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.driver_cpu_s = 0.0  # the driver thread's CPU in this attempt's start

    def _timed(self, call, *args):
        cpu0 = time.thread_time()
        try:
            return call(*args)
        finally:
            self.driver_cpu_s += time.thread_time() - cpu0

    def place(self, timeout_s, on_wait):
        return self._timed(super().place, timeout_s, on_wait)

    def start_actors(self) -> None:
        self._timed(super().start_actors)

    def setup(self, timeout_s: float) -> int:
        return self._timed(super().setup, timeout_s)

    def run(self, *args) -> None:
        self._timed(super().run, *args)

    def shutdown(self) -> None:
        firsts = [s.get("first_step") for s in self.timeline.ranks.values()]
        began = self.timeline.driver.get("scheduling")
        if firsts and None not in firsts and began and len(firsts) == len(self.actors):
            phases = {k: round(t - began, 3) for k, t in self.timeline.driver.items()}
            first = round(max(firsts) - began, 3)
            _STARTS.append(
                {**phases, "first_step": first, "driver_cpu": round(self.driver_cpu_s, 3)}
            )
        self.actors = []  # handles, not actors: the hosts go below
        self.pool.end_attempt()
        super().shutdown()
