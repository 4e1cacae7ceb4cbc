"""When an elastic or preemptible group changes size: drains, growth, resizes. Decides only.

The controller owns the state machine and every action; this policy is
asked at fixed points and answers with a ``ResizeDecision`` the controller
executes (``Controller._execute``): every poll (``poll``: drains, then
growth), a worker's termination notice (``on_notice``), spares ready
(``spares_ready``), a checkpoint committed (``committed``), a restart decided
(``restarting``, ``preempted``), slots placed (``placed``), an attempt started
(``started``). It never calls the group, the pool or the run's state.

What it watches comes in as plain values or read-only queries
(``draining_nodes``, ``growth``), so it is unit-tested with a fake clock and
no Ray.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass

from raytf.checkpoint.layout import CommittedCheckpoint
from raytf.config import ScalingConfig
from raytf.group.elastic import Resize, WorldSize
from raytf.settings import Settings


class Restart(enum.Enum):
    """Restart reasons that are not failures (they cost no retry)."""

    PREEMPTION = "preemption"  # a termination checkpoint committed: leave the draining node
    RESIZE = "capacity returned"  # spares are warm: restart larger


@dataclass(frozen=True)
class ResizeDecision:
    """What the controller does now; an empty decision does nothing."""

    say: tuple[str, ...] = ()  # progress lines
    request_checkpoint: str | None = None  # have the group save at its next step ("termination")
    warm_spares: tuple[int, ...] = ()  # start spares in these slots (then ask spares_ready)
    grow_to: WorldSize | None = None  # the size those spares are for
    evict: frozenset[str] = frozenset()  # give up the slots on these nodes
    restart: Restart | None = None  # restart the group at once
    drain: dict | None = None  # a new entry of the run's preemption log
    drain_committed: dict | None = None  # fields the log's newest entry gains
    resize: Resize | None = None  # a size change to record
    world_size: int | None = None  # the coming attempt's size


NOTHING = ResizeDecision()


class ResizePolicy:
    def __init__(self, scaling: ScalingConfig, settings: Settings):
        self.scaling = scaling
        self.settings = settings
        self.why = ""  # why the coming attempt may differ in size
        self.notice: str | None = None  # a termination notice this attempt acts on
        self.draining: dict[str, float] = {}  # this attempt's draining nodes -> deadlines
        self.grow_ready = False  # spares are warm: restart larger at the next commit
        self._last_world: int | None = None
        self._resize_from: int | None = None  # the size before a resize, until it resumes
        self._last_drain_check = 0.0
        self._last_grow_check = 0.0
        self._drain_logged = False  # this attempt's drain has a log entry
        self._drain_deadline: float | None = None  # and the deadline it logged

    # -- while running ------------------------------------------------------------
    def poll(
        self,
        now: float,
        draining_nodes: Callable[[], dict[str, float]],
        growth: Callable[[], tuple[WorldSize, list[int]] | None],
    ) -> ResizeDecision:
        """A drained node means a termination checkpoint; otherwise look for room to grow."""
        if self.notice:
            return NOTHING
        drained = self._check_drain(now, draining_nodes)
        if drained is not NOTHING:
            return drained
        return self._check_growth(now, growth)

    def on_notice(self, notice: str) -> ResizeDecision:
        """A termination notice (a drain, or a SIGTERM a worker's TF notifier caught)."""
        if self.notice is not None:
            return NOTHING
        self.notice = notice
        return ResizeDecision(
            say=(f"termination notice ({notice}): checkpoint at the next step, then restart",)
        )

    def spares_ready(self, size: WorldSize) -> ResizeDecision:
        """Every spare of a growth has TF imported: checkpoint, then restart larger."""
        self.grow_ready = True
        return ResizeDecision(
            say=(f"room for {size.workers} workers again: checkpoint, then restart at that size",),
            request_checkpoint="resize",
        )

    def committed(self, ckpt: CommittedCheckpoint) -> ResizeDecision:
        """A restart if this checkpoint was the one a drain or a growth waited for."""
        if ckpt.manifest["reason"] == "termination":
            entry = None
            if self.draining and self._drain_logged:
                # Did the termination checkpoint beat the drain deadline? `raytf status` shows it.
                at = ckpt.manifest["committed_at"]
                entry = {"checkpoint_step": ckpt.step, "committed_at": at}
                if self._drain_deadline:
                    entry["seconds_to_spare"] = round(self._drain_deadline - at, 3)
            return ResizeDecision(
                say=(f"termination checkpoint committed at step {ckpt.step}",),
                restart=Restart.PREEMPTION,
                drain_committed=entry,
            )
        return ResizeDecision(restart=Restart.RESIZE) if self.grow_ready else NOTHING

    # -- between attempts -----------------------------------------------------------
    def restarting(self, why: str) -> None:
        self.why = why

    def preempted(self) -> ResizeDecision:
        """The termination checkpoint is committed: restart, off the draining nodes."""
        self.notice = None
        self.why = "preemption"
        return ResizeDecision(evict=frozenset(self.draining))

    def placed(self, size: WorldSize, lost_nodes: set[str]) -> ResizeDecision:
        if lost_nodes and self.why not in ("preemption", "capacity returned"):
            self.why = "node lost"
        if self._last_world is not None and size.workers != self._last_world:
            self._resize_from = self._last_world
        self._last_world = size.workers
        return ResizeDecision(say=(size.note,) if size.note else (), world_size=size.workers)

    def started(self, attempt: int, restored_step: int) -> ResizeDecision:
        decision = NOTHING
        if self._resize_from is not None:
            after = self._last_world or 0
            resize = Resize(
                attempt, self._resize_from, after, self.why or "placement", restored_step
            )
            batch = self.scaling.global_batch_size
            kept = ""
            if batch:
                per = batch // (after * self.scaling.replicas_per_worker)
                kept = f"; global batch stays {batch}, {per} per replica"
            decision = ResizeDecision(say=(f"{resize.describe()}{kept}",), resize=resize)
            self._resize_from = None
        self.grow_ready = False
        self.draining = {}
        self._drain_logged = False
        self.notice = None  # new processes; a node still draining is seen again
        return decision

    # -- every poll -----------------------------------------------------------------
    def _check_drain(self, now: float, draining_nodes) -> ResizeDecision:
        """Act if Ray drains one of the group's nodes (asked at most once a second)."""
        if now - self._last_drain_check < self.settings.drain_check_interval_s:
            return NOTHING
        self._last_drain_check = now
        draining = draining_nodes()
        if not draining:
            return NOTHING
        self.draining = draining
        node, deadline = min(draining.items(), key=lambda kv: kv[1] or float("inf"))
        self._drain_logged, self._drain_deadline = True, deadline or None
        left = f", {deadline - time.time():.0f} s before its deadline" if deadline else ""
        noticed = self.on_notice(f"node {node[:12]} is draining{left}")
        return ResizeDecision(
            say=noticed.say,
            request_checkpoint="termination",
            drain={"node_id": node, "deadline": deadline or None, "noticed_at": time.time()},
        )

    def _check_growth(self, now: float, growth) -> ResizeDecision:
        """Elastic: slots placed again (a node joined) -> warm spares there, then grow."""
        if (
            not self.scaling.is_elastic
            or self.grow_ready
            or now - self._last_grow_check < self.settings.grow_check_interval_s
        ):
            return NOTHING
        self._last_grow_check = now
        found = growth()
        if found is None:
            return NOTHING
        size, slots = found
        return ResizeDecision(warm_spares=tuple(slots), grow_to=size)
