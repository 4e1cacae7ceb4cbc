"""How a run ends for its caller: the ``Result``, or ``TrainingFailedError`` carrying it.

Apart from the controller because it only reads: what the run did, from the
controller's records, into the one object the user's ``fit()`` returns, and
the closing progress line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raytf.driver.failure_policy import failure_message
from raytf.errors import TrainingFailedError
from raytf.result import Result

if TYPE_CHECKING:
    from raytf.driver.controller import Controller


def build_result(ctrl: Controller, state: str) -> Result:
    """The Result of a FINISHED or STOPPED run; raises TrainingFailedError for ERRORED."""
    elapsed = ctrl.clock() - ctrl.started
    latest = ctrl.ckpts.latest
    result = Result(
        metrics=ctrl.outputs.history[-1] if ctrl.outputs.history else {},
        metrics_history=ctrl.outputs.history,
        path=ctrl.run_dir,
        attempts=ctrl.attempt,
        elapsed_s=elapsed,
        worker_results=ctrl.outputs.worker_results,
        checkpoint=latest.path if latest else None,
        best_checkpoints=ctrl.ckpts.best_checkpoints(),
        error=ctrl.error,
        failures=[f.describe() for f in ctrl.failures],
        recoveries_s=list(ctrl.watchdog.recoveries_s),
        preemptions=ctrl.preemptions,
        resizes=list(ctrl.status.resizes),
        driver_round_ms=ctrl.rounds.summary_ms(),
    )
    if state == "FINISHED":
        ctrl.progress.finish(
            f"finished in {elapsed:.1f} s: attempt {ctrl.attempt}, "
            f"{len(ctrl.failures)} failure(s), {ctrl.preemptions} preemption(s)"
        )
        return result
    if state == "STOPPED":
        why = ctrl.stopper.name or "request"  # a signal to the driver, or Tune's scheduler
        ctrl.progress.finish(f"stopped on {why} after {elapsed:.1f} s")
        return result
    err = ctrl.error
    ctrl.progress.finish(f"failed after {elapsed:.1f} s: {err}")
    message = failure_message(err, ctrl.failures)
    failure = TrainingFailedError(message, [f.cause for f in ctrl.failures] or [err])
    failure.result = result  # type: ignore[attr-defined]
    raise failure from err
