"""How often a worker copies its state for an emergency checkpoint: as often as it is cheap.

The copy (``raytf.checkpoint.emergency.LastStep``) costs what moving the whole state
costs: device-memory bandwidth on a GPU, a memcpy on a CPU. For a 400 MB state on
this 2-core machine that is about 10 % of a step; for a small model it is the
call's fixed cost, again a large share of a millisecond step. Taken every ``k``
steps instead of every step, it costs ``1/k`` of that, and a SIGKILL redoes at
most ``k - 1`` steps (the survivors' copy is at most that old).

``k`` is measured in the run, not guessed: after a warm-up (the first steps trace
and compile), steps that follow a copy are timed against steps that follow
none, alternately, and ``k`` is the smallest whole number that keeps the
copy's share of a step within ``BUDGET``. Most of a copy's cost lands in the
step after it (the snapshot shares the variables' buffers, and the next
update copies each before writing it; on a GPU the copy is also queued), so
the share is the median difference between each step after a copy and the
step after none beside it (a drift, such as a save being written, moves both
of a pair), over the median step. On a busy machine that can still read 0;
the copy's own time, timed where it is taken, is a floor under it. A copy
whose cost is within the budget is taken every step (``k = 1``: nothing
redone). Where the run's workers have been dying
often, fewer redone steps are worth more copies: with ``T`` seconds between
the run's restarts so far (a death, or a preemption or resize: those only
shorten it), a copy costing ``c`` seconds and steps of ``t``, the interval
that loses least is about ``sqrt(2 c T) / t`` steps (Young's formula for
checkpoint intervals), and ``k`` is that where it is smaller. Where step
boundaries are not consecutive (Keras's ``fit`` with input whose position is not
exact calls back at epoch ends only), every boundary is copied: one copy an
epoch costs nothing worth measuring.

Every rank must hold the same step or the emergency checkpoint is refused, so
the ranks must copy at the same steps. They decide from their step sequence,
the same on every rank, and agree on one ``k`` (the largest any rank measured)
through TensorFlow's coordination-service key-value store, with no collective,
when their samples are complete: every rank gets there at the same step. The
driver keeps the agreed cost (the workers' polls carry it) and gives it, with
the run's time between failures, to the later attempts, which compute ``k``
from them at their first step: measuring costs about ten copies, once a run,
not once per restart.
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


Cost = tuple[float, float]  # (the copy's share of a step, the step's seconds)


def measured(
    after_copy: list[float], after_none: list[float], copies: list[float] | None = None
) -> Cost:
    """The copy's share of a step (the median of the paired differences over the median
    step after none) and that step's time; no less than the median of the copies' own
    times (``copies``) over the step."""
    base = statistics.median(after_none)
    if base <= 0:
        return 0.0, base
    # Each step after a copy against the step after none beside it: a drift (a save
    # being written, another process's burst) moves both of a pair, not the difference.
    extra = statistics.median(a - n for a, n in zip(after_copy, after_none))
    share = max(0.0, extra) / base
    if copies:
        share = max(share, statistics.median(copies) / base)
    return share, base


def interval(cost: Cost, failure_interval_s: float | None = None) -> int:
    """The steps between copies: within ``BUDGET``, and no longer than Young's interval
    where the run restarts every ``failure_interval_s``."""
    share, step_s = cost
    k = math.ceil(share / BUDGET - 1e-9)
    if failure_interval_s and share > 0 and step_s > 0:
        k = min(k, round(math.sqrt(2 * share * failure_interval_s / step_s)))
    return min(MAX_EVERY, max(1, k))


def agree_through_kv(rank: int, world_size: int) -> Callable[[Cost], Cost]:
    """The costs every rank measured, made one (the largest share, the longest step),
    through the coordination service's store: every rank gets the same."""

    def agree(cost: Cost) -> Cost:
        if world_size <= 1:
            return cost
        from tensorflow.python.eager import context

        kv = context.context()
        kv.set_config_key_value(_KEY.format(rank), f"{cost[0]!r}:{cost[1]!r}")
        costs = [kv.get_config_key_value(_KEY.format(r)).split(":") for r in range(world_size)]
        return max(float(c[0]) for c in costs), max(float(c[1]) for c in costs)

    return agree


class Cadence:
    """One rank's copy decisions; ``copy_now`` is called at every resumable step boundary,
    in the same order on every rank."""

    def __init__(
        self,
        every: int | None,
        agree: Callable[[Cost], Cost],
        cost: Cost | None = None,
        failure_interval_s: float | None = None,
    ):
        """``every``: a setting; else ``cost``, as an earlier attempt measured it; else
        measured here. ``failure_interval_s``: the run's seconds between restarts."""
        self.failure_interval_s = failure_interval_s
        self.cost: Cost | None = None  # the cost measured here, once agreed
        if every is None and cost is not None:
            every = interval(cost, failure_interval_s)
        self.every = every  # None until measured
        self._agree = agree
        self._calls = 0
        self._prev: tuple[int, float, bool] | None = None  # step, time, copied there
        self._after_copy: list[float] = []
        self._after_none: list[float] = []
        self._copy_s: list[float] = []  # the copies' own times while measuring
        self._pending: float | None = None  # a step after a copy, awaiting its neighbour
        self._copied_at: int | None = None

    def copy_now(self, step: int, now: float) -> bool:
        """Whether to copy the state at ``step`` (``now``: a monotonic clock, read before
        any copy at this boundary)."""
        self._calls += 1
        prev, consecutive = self._prev, False
        if prev is not None:
            consecutive = step == prev[0] + 1
            if consecutive and self.every is None and self._calls > WARMUP:
                self._sample(now - prev[1], after_copy=prev[2])
            elif not consecutive:
                self._pending = None  # its neighbour is not the step beside it
        if self.every is None and min(len(self._after_copy), len(self._after_none)) >= SAMPLES:
            cost = measured(self._after_copy, self._after_none, self._copy_s)
            self.cost = self._agree(cost)
            self.every = interval(self.cost, self.failure_interval_s)
        if self.every is not None:
            due = self._copied_at is None or step - self._copied_at >= self.every
        else:  # measuring: alternate (a boundary after a gap is copied, not timed)
            due = not consecutive or not prev[2]
        self._prev = (step, now, due)
        if due:
            self._copied_at = step
        return due

    def _sample(self, step_s: float, after_copy: bool) -> None:
        """Samples kept in pairs: a step after a copy, then the step after none beside it
        (a gap between boundaries breaks a pair, and its half is dropped)."""
        if after_copy:
            self._pending = step_s
        elif self._pending is not None:
            self._after_copy.append(self._pending)
            self._after_none.append(step_s)
            self._pending = None

    def copy_took(self, seconds: float) -> None:
        """The time the copy just taken took, where it was taken (a floor under its cost)."""
        if self.every is None and self._calls > WARMUP:
            self._copy_s.append(seconds)

    def describe(self) -> str:
        """The line rank 0 prints once the ranks agreed."""
        k, share = self.every, (self.cost or (0.0, 0.0))[0]
        redo = "nothing completed is redone" if k == 1 else f"a death redoes up to {k - 1}"
        return (
            f"[raytf] emergency checkpoints: the state is copied every {k} step(s) "
            f"(a copy measured {share:.1%} of a step; {redo})"
        )
