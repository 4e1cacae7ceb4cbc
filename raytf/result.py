"""What ``Trainer.fit`` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Result:
    """The outcome of a run.

    ``metrics`` is rank 0's last report and ``metrics_history`` all of rank 0's
    reports in order (as in Ray Train). ``worker_results`` holds each rank's
    return value of ``train_loop_per_worker``, rank-ordered, so a run can check
    that every worker ended in the same state. ``checkpoint`` is the latest
    committed checkpoint (a directory), if any. ``failures`` describes each
    failure survived or not, ``recoveries_s`` the time from each restart's
    start to the first resumed step, ``preemptions`` the restarts that
    followed a termination notice (not counted as failures).
    """

    metrics: dict[str, Any]
    metrics_history: list[dict[str, Any]]
    path: str
    attempts: int
    elapsed_s: float
    worker_results: list[Any] = field(default_factory=list)
    checkpoint: str | None = None
    error: BaseException | None = None
    failures: list[str] = field(default_factory=list)
    recoveries_s: list[float] = field(default_factory=list)
    preemptions: int = 0
