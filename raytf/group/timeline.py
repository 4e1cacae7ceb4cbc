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

# Past this many ranks, ``ranks`` lists the slowest (their newest stamp latest) and
# ``ranks_total`` counts them all, as state.json's ``workers`` does its stragglers.
RANKS_LISTED = 64

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
        driver's phases, the slowest rank's of each worker phase, and each rank's (the
        ``RANKS_LISTED`` slowest past that many)."""
        out: dict = {"driver_started": round(self.origin, 3)}
        out.update({k: round(v - self.origin, 3) for k, v in self.driver.items()})
        for phase in WORKER_PHASES:
            times = [r[phase] for r in self.ranks.values() if phase in r]
            if times:
                out[f"workers_{phase}"] = round(max(times) - self.origin, 3)
        listed = self.ranks
        if len(listed) > RANKS_LISTED:  # the slowest ones: state.json stays bounded
            slowest = sorted(listed, key=lambda r: max(listed[r].values()), reverse=True)
            listed = {r: listed[r] for r in slowest[:RANKS_LISTED]}
            out["ranks_total"] = len(self.ranks)
        out["ranks"] = {
            str(rank): {k: round(v - self.origin, 3) for k, v in stamps.items()}
            for rank, stamps in sorted(listed.items())
        }
        return out
