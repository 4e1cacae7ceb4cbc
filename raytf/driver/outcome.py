"""How a run ends for its caller: the ``Result``, or ``TrainingFailedError`` carrying it.

Built from a ``RunRecord``: what the run did, as its driver ends it. The
controller makes one from its records (``Controller.record``), local mode
from its one in-process attempt, so both hand the user the same ``Result``
and end the same way; neither is read by this module beyond the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raytf.driver.failure_policy import Failure, failure_message
from raytf.errors import TrainingFailedError
from raytf.result import Result


@dataclass(frozen=True)
class RunRecord:
    """What a run did, as its driver ends it."""

    state: str  # FINISHED, STOPPED or ERRORED
    run_dir: str
    attempts: int
    elapsed_s: float
    history: list[dict[str, Any]]  # rank 0's reports, in order
    worker_results: list[Any]
    checkpoint: str | None  # the latest committed checkpoint
    best_checkpoints: list[tuple[str, float | None]]
    error: BaseException | None = None  # what ended an ERRORED run
    failures: list[Failure] = field(default_factory=list)
    recoveries_s: list[float] = field(default_factory=list)
    preemptions: int = 0
    resizes: list[dict[str, Any]] = field(default_factory=list)
    driver_round_ms: dict[str, float] = field(default_factory=dict)
    stopped_by: str | None = None  # a signal's name; None: a request (Tune's scheduler)


def build_result(
    record: RunRecord,
    finish: Callable[[str], None] = lambda line: None,
    failed: Callable[[RunRecord], str] | None = None,
) -> Result:
    """The Result of a FINISHED or STOPPED run; raises TrainingFailedError for ERRORED.

    ``finish`` takes the closing progress line; ``failed`` words the error raised
    (default: the final cause, every failure before it, the rank's traceback).
    """
    elapsed = record.elapsed_s
    result = Result(
        metrics=record.history[-1] if record.history else {},
        metrics_history=record.history,
        path=record.run_dir,
        attempts=record.attempts,
        elapsed_s=elapsed,
        worker_results=record.worker_results,
        checkpoint=record.checkpoint,
        best_checkpoints=record.best_checkpoints,
        error=record.error,
        failures=[f.describe() for f in record.failures],
        recoveries_s=list(record.recoveries_s),
        preemptions=record.preemptions,
        resizes=list(record.resizes),
        driver_round_ms=record.driver_round_ms,
    )
    if record.state == "FINISHED":
        finish(
            f"finished in {elapsed:.1f} s: attempt {record.attempts}, "
            f"{len(record.failures)} failure(s), {record.preemptions} preemption(s)"
        )
        return result
    if record.state == "STOPPED":
        why = record.stopped_by or "request"  # a signal to the driver, or Tune's scheduler
        finish(f"stopped on {why} after {elapsed:.1f} s")
        return result
    err = record.error
    finish(f"failed after {elapsed:.1f} s: {err}")
    message = failed(record) if failed else failure_message(err, record.failures)
    failure = TrainingFailedError(message, [f.cause for f in record.failures] or [err])
    failure.result = result  # type: ignore[attr-defined]
    raise failure from err
