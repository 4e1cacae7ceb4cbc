"""What a run has produced so far: rank 0's metrics history and each rank's return value.

Kept across attempts: after a restart, the history keeps what happened up to
the restored step (what came after is redone) and the return values start
over, since only the last attempt's workers return.
"""

from __future__ import annotations

import time
from typing import Any

from raytf.messages import Report, WorkerPoll

SLOW_DRIVER_S = 5.0  # a rank's finish seen this late is worth a line


class Outputs:
    def __init__(self):
        self.history: list[dict[str, Any]] = []
        self.worker_results: list[Any] = []
        self.finished_ranks: set[int] = set()

    def new_attempt(self, world_size: int, restored_step: int) -> None:
        self.history = [m for m in self.history if m.get("step", 0) <= restored_step]
        self.worker_results = [None] * world_size
        self.finished_ranks.clear()

    def add_reports(self, reports: list[Report]) -> list[dict[str, Any]]:
        """Keep rank 0's reports; returns them (what listeners hear)."""
        mine = [r.metrics for r in reports if r.rank == 0]
        self.history.extend(mine)
        return mine

    def finished(self, rank: int, poll: WorkerPoll) -> str | None:
        """Take a rank's return value (once); a line to show if the driver saw it late."""
        if rank in self.finished_ranks:
            return None
        self.finished_ranks.add(rank)
        self.worker_results[rank] = poll.result
        late = time.time() - (poll.ended_at or time.time())
        return f"driver: saw rank {rank} finish {late:.1f} s late" if late > SLOW_DRIVER_S else None

    def all_finished(self, world_size: int) -> bool:
        return len(self.finished_ranks) == world_size
