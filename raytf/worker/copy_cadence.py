"""How often a worker copies its state for an emergency checkpoint: as often as it is cheap.

The copy (``raytf.worker.emergency.LastStep``) costs what moving the whole state
costs: device-memory bandwidth on a GPU, a memcpy on a CPU. For a 400 MB state on
this 2-core machine that is about 10 % of a step; for a small model it is the
call's fixed cost, again a large share of a millisecond step. Taken every ``k``
steps instead of every step, it costs ``1/k`` of that, and a SIGKILL redoes at
most ``k - 1`` steps (the survivors' copy is at most that old).

``k`` is measured in the run, not guessed: after a warm-up (the first steps trace
and compile), steps that follow a copy are timed against steps that follow
none, alternately, and ``k`` is the smallest whole number that keeps the copy's
share of a step within ``BUDGET``. A copy whose cost is within the budget is taken
every step (``k = 1``: nothing redone). Where step boundaries are not consecutive
(Keras's ``fit`` with input whose position is not exact calls back at epoch ends
only), every boundary is copied: one copy an epoch costs nothing worth measuring.

Every rank must hold the same step or the emergency checkpoint is refused, so
the ranks must copy at the same steps. They decide from their step sequence,
the same on every rank, and agree on one ``k`` (the largest any rank measured)
through TensorFlow's coordination-service key-value store, with no collective,
when their samples are complete: every rank gets there at the same step.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

BUDGET = 0.01  # the copy's share of a step's time, amortized
WARMUP = 4  # step boundaries before timing: the first steps trace and compile
SAMPLES = 8  # steps timed after a copy, and as many after none
MAX_EVERY = 100  # the most steps a death redoes: within the budget for a copy up to a step
_KEY = "raytf_copy_every_{}"


def every_for(after_copy: list[float], after_none: list[float]) -> tuple[int, float]:
    """(k, the copy's measured share of a step): the smallest k within ``BUDGET``."""
    base = statistics.median(after_none)
    share = max(0.0, statistics.median(after_copy) - base) / base if base > 0 else 0.0
    return min(MAX_EVERY, max(1, math.ceil(share / BUDGET - 1e-9))), share


def agree_through_kv(rank: int, world_size: int) -> Callable[[int], int]:
    """The largest ``k`` any rank proposes, through the coordination service's store."""

    def agree(k: int) -> int:
        if world_size <= 1:
            return k
        from tensorflow.python.eager import context

        kv = context.context()
        kv.set_config_key_value(_KEY.format(rank), str(k))
        return max(int(kv.get_config_key_value(_KEY.format(r))) for r in range(world_size))

    return agree


class Cadence:
    """One rank's copy decisions; ``copy_now`` is called at every resumable step boundary,
    in the same order on every rank."""

    def __init__(self, every: int | None, agree: Callable[[int], int]):
        self.every = every  # None until measured
        self.share: float | None = None  # the copy's share of a step, once measured
        self._agree = agree
        self._calls = 0
        self._prev: tuple[int, float, bool] | None = None  # step, time, copied there
        self._after_copy: list[float] = []
        self._after_none: list[float] = []
        self._copied_at: int | None = None

    def copy_now(self, step: int, now: float) -> bool:
        """Whether to copy the state at ``step`` (``now``: a monotonic clock, read before
        any copy at this boundary)."""
        self._calls += 1
        prev, consecutive = self._prev, False
        if prev is not None:
            consecutive = step == prev[0] + 1
            if consecutive and self.every is None and self._calls > WARMUP:
                (self._after_copy if prev[2] else self._after_none).append(now - prev[1])
        if self.every is None and min(len(self._after_copy), len(self._after_none)) >= SAMPLES:
            k, self.share = every_for(self._after_copy, self._after_none)
            self.every = self._agree(k)
        if self.every is not None:
            due = self._copied_at is None or step - self._copied_at >= self.every
        else:  # measuring: alternate (a boundary after a gap is copied, not timed)
            due = not consecutive or not prev[2]
        self._prev = (step, now, due)
        if due:
            self._copied_at = step
        return due

    def describe(self) -> str:
        """The line rank 0 prints once the ranks agreed."""
        k, share = self.every, self.share or 0.0
        redo = "nothing completed is redone" if k == 1 else f"a death redoes up to {k - 1}"
        return (
            f"[raytf] emergency checkpoints: the state is copied every {k} step(s) "
            f"(a copy measured {share:.1%} of a step on rank 0; {redo})"
        )
