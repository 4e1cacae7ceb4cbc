"""The driver's view of capacity coming and going: notices, drains, growth, resizes.

The controller owns the state machine; this object owns what an elastic or
preemptible group adds to it, and is called at fixed points: every poll
(``poll``: drains and growth), a worker's termination notice (``on_notice``),
a checkpoint commits (``committed``), a restart is decided (``restarting``,
``preempted``), slots are placed (``placed``), an attempt starts
(``started``). Its decisions come back as restart reasons ("preemption",
"resize") the controller acts on; its records land in ``RunState`` for
``raytf status``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from raytf.config import ScalingConfig
from raytf.driver.progress import Progress
from raytf.group.elastic import Resize, WorldSize
from raytf.rundir.checkpoints import CommittedCheckpoint
from raytf.rundir.run_state import RunState

DRAIN_CHECK_INTERVAL_S = float(os.environ.get("RAYTF_DRAIN_CHECK_INTERVAL_S", "1.0"))
GROW_CHECK_INTERVAL_S = float(os.environ.get("RAYTF_GROW_CHECK_INTERVAL_S", "2.0"))

PREEMPTION, RESIZE = "preemption", "resize"  # restart reasons that are not failures


class Resizer:
    def __init__(self, scaling: ScalingConfig, status: RunState, progress: Progress):
        self.scaling = scaling
        self.status = status
        self.progress = progress
        self.why = ""  # why the coming attempt may differ in size
        self.notice: str | None = None  # a termination notice this attempt acts on
        self.draining: dict[str, float] = {}  # this attempt's draining nodes -> deadlines
        self.grow_ready = False  # spares are warm: restart larger at the next commit
        self._last_world: int | None = None
        self._resize_from: int | None = None  # the size before a resize, until it resumes
        self._last_drain_check = 0.0
        self._last_grow_check = 0.0

    # -- the controller's fixed points ------------------------------------------
    def poll(self, now: float, group: Any, pool: Any) -> None:
        """While running: a drained node means a termination checkpoint; else look for room."""
        if self.notice:
            return
        notice = self._check_drain(now, group)
        if notice:
            self.on_notice(notice)
            group.request_checkpoint("termination")
        else:
            self._check_growth(now, pool, group)

    def on_notice(self, notice: str) -> None:
        """A termination notice (a drain, or a SIGTERM a worker's TF notifier caught)."""
        if self.notice is None:
            self.notice = notice
            self.progress.message(
                f"termination notice ({notice}): checkpoint at the next step, then restart"
            )

    def restarting(self, why: str) -> None:
        self.why = why

    def preempted(self, pool: Any) -> None:
        """The termination checkpoint is committed: restart, off the draining nodes."""
        self.notice = None
        left = pool.evict(set(self.draining)) if self.draining else []
        moved = f", leaving {len(left)} slot(s) on draining nodes" if left else ""
        self.progress.message(f"restarting the group after its termination checkpoint{moved}")
        self.why = "preemption"

    def placed(self, size: WorldSize, lost_nodes: set[str]) -> None:
        self.status.world_size = size.workers
        if lost_nodes and self.why not in ("preemption", "capacity returned"):
            self.why = "node lost"
        if size.note:
            self.progress.message(size.note)
        if self._last_world is not None and size.workers != self._last_world:
            self._resize_from = self._last_world
        self._last_world = size.workers

    def started(self, attempt: int, restored_step: int) -> None:
        if self._resize_from is not None:
            self._record(attempt, self._resize_from, self.status.world_size, restored_step)
            self._resize_from = None
        self.grow_ready = False
        self.draining = {}
        self.notice = None  # new processes; a node still draining is seen again

    def committed(self, ckpt: CommittedCheckpoint) -> str | None:
        """A restart reason if this checkpoint was the one a drain or a growth waited for."""
        if ckpt.manifest["reason"] == "termination":
            self.progress.message(f"termination checkpoint committed at step {ckpt.step}")
            self._log_drain_commit(ckpt)
            return PREEMPTION
        return RESIZE if self.grow_ready else None

    # -- every poll -----------------------------------------------------------------
    def _check_drain(self, now: float, group: Any) -> str | None:
        """A notice to act on if Ray drains one of the group's nodes (at most once a second)."""
        if now - self._last_drain_check < DRAIN_CHECK_INTERVAL_S:
            return None
        self._last_drain_check = now
        draining = group.draining_nodes()
        if not draining:
            return None
        self.draining = draining
        node, deadline = min(draining.items(), key=lambda kv: kv[1] or float("inf"))
        self.status.preemption_log.append(
            {"node_id": node, "deadline": deadline or None, "noticed_at": time.time()}
        )
        left = f", {deadline - time.time():.0f} s before its deadline" if deadline else ""
        return f"node {node[:12]} is draining{left}"

    def _check_growth(self, now: float, pool: Any, group: Any) -> None:
        """Elastic: slots placed again (a node joined) -> warm spares there, then grow."""
        if (
            not self.scaling.is_elastic
            or self.grow_ready
            or now - self._last_grow_check < GROW_CHECK_INTERVAL_S
        ):
            return
        self._last_grow_check = now
        growth = pool.growth()
        if growth is None:
            return
        size, slots = growth
        if pool.warm_spares(slots):
            self.grow_ready = True
            self.progress.message(
                f"room for {size.workers} workers again: checkpoint, then restart at that size"
            )
            group.request_checkpoint("resize")

    # -- records --------------------------------------------------------------------
    def _log_drain_commit(self, ckpt: CommittedCheckpoint) -> None:
        """Did the termination checkpoint beat the drain deadline? ``raytf status`` shows it."""
        if self.draining and self.status.preemption_log:
            entry = self.status.preemption_log[-1]
            entry["checkpoint_step"] = ckpt.step
            entry["committed_at"] = ckpt.manifest["committed_at"]
            if entry.get("deadline"):
                entry["seconds_to_spare"] = round(entry["deadline"] - entry["committed_at"], 3)

    def _record(self, attempt: int, before: int, after: int, step: int) -> None:
        resize = Resize(attempt, before, after, self.why or "placement", step)
        self.status.resizes.append(resize.to_dict())
        batch = self.scaling.global_batch_size
        kept = ""
        if batch:
            per = batch // (after * self.scaling.replicas_per_worker)
            kept = f"; global batch stays {batch}, {per} per replica"
        self.progress.message(f"{resize.describe()}{kept}")
