"""The driver's sense of progress: is the group moving, hung, or back after a restart?

Pure bookkeeping on the driver's clock (tests pass a fake one). The
controller feeds it steps, reports, the progress workers saw for themselves
and the silent phases they are in (``raytf.worker.liveness``), and asks it
whether to declare a hang and how long a recovery took. A rank in a phase
within its limit holds the hang clock (a restore on rank 0 keeps its peers
waiting, silent, in their first collective); a phase past its limit is a
hang that names it.
"""

from __future__ import annotations

from collections.abc import Callable

from raytf.config import FailureConfig
from raytf.errors import WorkerHangError
from raytf.messages import Phase


class Watchdog:
    def __init__(self, config: FailureConfig, now: float):
        self.config = config
        self.last_progress = now
        self.last_step: int | None = None
        self.first_step_at: float | None = None  # this attempt's first step, on this clock
        self._restart_began: float | None = None
        self._restored_step = 0
        self.recoveries_s: list[float] = []
        self.silent: list[int] = []  # the ranks the last hang found unresponsive
        # Each rank's open silent phases, and when its poll said so (ages grow from there:
        # a rank that stops answering mid-phase does not hold the clock at that age).
        self.phases: dict[int, tuple[tuple[Phase, ...], float]] = {}

    def attempt_started(self, now: float, restored_step: int) -> None:
        self.last_progress = now
        self.last_step = None
        self.first_step_at = None
        self._restored_step = restored_step
        self.phases = {}

    def restart_began(self, now: float) -> None:
        self._restart_began = now

    def on_activity(self, now: float) -> None:
        self.last_progress = now

    def on_phases(self, rank: int, phases: tuple[Phase, ...], now: float) -> None:
        self.phases[rank] = (phases, now)

    def on_step(self, step: int, now: float) -> float | None:
        """Rank 0 reached ``step``. Returns the recovery time if this is the first resumed step."""
        if step == self.last_step:
            return None
        if self.first_step_at is None:
            self.first_step_at = now
        self.last_step = step
        self.last_progress = now
        if self._restart_began is not None and step > self._restored_step:
            took = now - self._restart_began
            self._restart_began = None
            self.recoveries_s.append(took)
            return took
        return None

    def check(
        self, now: float, silent_ranks: Callable[[float], list[int]]
    ) -> WorkerHangError | None:
        """A hang, if any: a rank that stopped answering polls, or no progress at all."""
        silent = self.silent = silent_ranks(self.config.unresponsive_timeout_s)
        if silent:
            return WorkerHangError(
                f"ranks {silent} answered no poll for {self.config.unresponsive_timeout_s:g} s "
                "(stopped or deadlocked; unresponsive_timeout_s)"
            )
        default = self.config.phase_timeout_s
        for rank, (phases, said) in sorted(self.phases.items()):
            for phase in phases:
                limit = default if phase.limit_s is None else phase.limit_s
                if limit is not None:
                    limit += phase.extra_s
                age = phase.age_s + (now - said)
                if limit is not None and age > limit:
                    which = "phase_timeout_s" if phase.limit_s is None else "the loop's limit"
                    if phase.extra_s:
                        which += f" + {phase.extra_s:.0f} s for the input's skip"
                    return WorkerHangError(
                        f"rank {rank}: {phase.name} has been silent for {age:.0f} s, past "
                        f"its limit of {limit:g} s ({which})"
                    )
        if any(phases for phases, _ in self.phases.values()):
            self.last_progress = now  # the hang clock starts again when the phases end
            return None
        if now - self.last_progress < self.config.hang_timeout_s:
            return None
        return WorkerHangError(
            f"no progress for {now - self.last_progress:.0f} s "
            f"(hang_timeout_s={self.config.hang_timeout_s:g})"
        )
