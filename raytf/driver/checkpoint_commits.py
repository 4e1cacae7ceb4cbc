"""The driver's checkpoint bookkeeping: collect parts, commit, prune, and say when to save.

Parts of one attempt never mix with another's: a restart clears whatever was
pending, so a save interrupted by a failure simply never commits and the
previous committed checkpoint stays the latest.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict

from raytf.config import CheckpointConfig
from raytf.messages import CheckpointPart
from raytf.rundir.checkpoints import (
    CKPT_DIR,
    CommittedCheckpoint,
    commit,
    committed,
    latest_intact,
    mark_bad,
    prune,
)
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")


class CheckpointCoordinator:
    def __init__(self, storage: Storage, config: CheckpointConfig, world_size: int):
        self.storage = storage
        self.config = config
        self.world_size = world_size
        self.bad: set[int] = set()
        self.latest: CommittedCheckpoint | None = latest_intact(storage)
        # The committed checkpoints that exist (pruned ones leave): what status lists.
        self.kept: list[int] = committed(storage)
        self.save_seconds: list[float] = []
        self._pending: dict[int, dict[int, CheckpointPart]] = defaultdict(dict)
        self._last_save = time.monotonic()
        self._requested_at: float | None = None

    def worker_args(self) -> dict:
        """What each worker's checkpointer needs: where, how often, what to restore."""
        return {
            "dir": CKPT_DIR,
            "every_steps": self.config.checkpoint_every_steps,
            "async_save": self.config.async_save,
            "restore_url": self.latest.path if self.latest else None,
        }

    def restore_point(self) -> CommittedCheckpoint | None:
        """The newest committed checkpoint whose files are intact (re-checked every time)."""
        self.latest = latest_intact(self.storage, skip=self.bad)
        return self.latest

    def new_attempt(self, world_size: int) -> None:
        """An elastic group's size may differ from one attempt to the next."""
        self.world_size = world_size
        self._pending.clear()
        self._requested_at = None
        self._last_save = time.monotonic()

    def on_parts(self, parts: list[CheckpointPart], *, attempt: int) -> list[CommittedCheckpoint]:
        done = []
        for part in parts:
            self._pending[part.step][part.rank] = part
        for step in sorted(self._pending):
            if len(self._pending[step]) == self.world_size:
                ranks = self._pending.pop(step)
                ckpt = commit(
                    self.storage, list(ranks.values()), world_size=self.world_size, attempt=attempt
                )
                self.latest = ckpt
                self.kept.append(step)
                self.save_seconds.append(ckpt.manifest["save_seconds"])
                self._last_save = time.monotonic()
                self._requested_at = None
                removed = prune(self.storage, self.config.num_to_keep)
                self.kept = [s for s in self.kept if s not in removed]
                if removed:
                    logger.debug("pruned checkpoints %s", removed)
                done.append(ckpt)
        return done

    def time_due(self, now: float) -> bool:
        """True once per ``checkpoint_every_s``; the caller asks the group to save."""
        every = self.config.checkpoint_every_s
        if every is None or self._requested_at is not None:
            return False
        if now - self._last_save >= every:
            self._requested_at = now
            return True
        return False

    def mark_bad(self, step: int, why: str) -> None:
        self.bad.add(step)
        try:
            mark_bad(self.storage, step, why)
        except OSError as exc:
            logger.warning("could not mark checkpoint %d bad: %s", step, exc)
