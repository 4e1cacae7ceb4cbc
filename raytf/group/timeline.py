"""One attempt's start-up timeline: where the seconds before the first step went.

The driver's phases (``scheduling``: its imports, Ray joined, the run set up;
slots placed; actors ready; MWMS created on every rank; loops started) and
each rank's (process start, actor ready, TensorFlow imported, MWMS created,
first step), as seconds after the driver's process started. A phase of the
group ends when its slowest rank's does. ``raytf status`` shows it
(``state.json``'s ``startup``) and ``raytf bench`` reports its medians.
"""

from __future__ import annotations

import time

from raytf.worker.process.startup import WORKER_PHASES, process_start_time

DRIVER_PHASES = ("scheduling", "placed", "actors_ready", "group_created", "loops_started")


class Timeline:
    def __init__(self) -> None:
        self.origin = process_start_time() or time.time()
        self.driver: dict[str, float] = {}
        self.ranks: dict[int, dict[str, float]] = {}

    def mark(self, phase: str) -> None:
        self.driver[phase] = time.time()

    def add_rank(self, rank: int, stamps: dict | None) -> bool:
        """A rank's stamps from its poll; True the first time they come."""
        if not stamps or rank in self.ranks:
            return False
        self.ranks[rank] = dict(stamps)
        return True

    def summary(self) -> dict:
        """Seconds after the driver's process start (``driver_started``, wall time): the
        driver's phases, the slowest rank's of each worker phase, and each rank's."""
        out: dict = {"driver_started": round(self.origin, 3)}
        out.update({k: round(v - self.origin, 3) for k, v in self.driver.items()})
        for phase in WORKER_PHASES:
            times = [r[phase] for r in self.ranks.values() if phase in r]
            if times:
                out[f"workers_{phase}"] = round(max(times) - self.origin, 3)
        out["ranks"] = {
            str(rank): {k: round(v - self.origin, 3) for k, v in stamps.items()}
            for rank, stamps in sorted(self.ranks.items())
        }
        return out
