"""Elastic world sizes: which size to run at, and the record of every resize.

Pure logic, unit-tested without Ray. The pool says how many worker slots it
could place; ``choose_world_size`` turns that into the size to run at. The
global batch is what a user tuned (with the learning rate), so it never
changes: a size over which it does not split is skipped in favour of the
largest smaller one that it does, and the choice says why.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from raytf.config import ScalingConfig
from raytf.errors import ConfigError


@dataclass(frozen=True)
class WorldSize:
    workers: int
    note: str | None = None  # why fewer workers than could be placed, if so


def splits(scaling: ScalingConfig, workers: int) -> bool:
    """Does the global batch (if known) split evenly over ``workers`` workers' replicas?"""
    g = scaling.global_batch_size
    return g is None or g % (workers * scaling.replicas_per_worker) == 0


def choose_world_size(scaling: ScalingConfig, placeable: int) -> WorldSize | None:
    """The largest size between min and max that ``placeable`` slots hold and the batch splits
    over; None if there is none (fewer than min placeable, or no size splits the batch)."""
    top = min(placeable, scaling.max_workers)
    for n in range(top, scaling.min_workers - 1, -1):
        if splits(scaling, n):
            note = None
            if n < top:
                skipped = ", ".join(str(k) for k in range(top, n, -1))
                note = (
                    f"global batch {scaling.global_batch_size} does not split over "
                    f"{skipped} worker(s) x {scaling.replicas_per_worker} replica(s): "
                    f"running {n} worker(s) of the {top} that could be placed"
                )
            return WorldSize(n, note)
    return None


def check_batch_splits(scaling: ScalingConfig) -> None:
    """At construction: some size between min and max must split the global batch."""
    if choose_world_size(scaling, scaling.max_workers) is None:
        raise ConfigError(
            f"ScalingConfig.global_batch_size = {scaling.global_batch_size} splits over no "
            f"world size in num_workers = {scaling.num_workers} "
            f"({scaling.replicas_per_worker} replica(s) per worker)"
        )


@dataclass(frozen=True)
class Resize:
    """One change of world size, as ``raytf status`` lists it."""

    attempt: int
    before: int
    after: int
    reason: str  # node lost | capacity returned | preemption | ...
    step: int  # the committed step the resized group resumed from
    at: float = field(default_factory=time.time)

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        verb = "shrinks" if self.after < self.before else "grows"
        return f"group {verb} {self.before} -> {self.after} workers ({self.reason})"
