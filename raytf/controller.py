"""The driver's control loop, as an explicit state machine.

    SCHEDULING -> STARTING -> RUNNING -> FINISHED
         ^            |          |
         +-- (port clash)        +----> ERRORED

Each state is one method that does its work and returns the next state;
``run`` only loops until a terminal state. The worker group is the only thing
the controller touches on the cluster, and ``worker_group_cls`` can be swapped
for a fake so transitions are tested without Ray.
"""

from __future__ import annotations

import enum
import logging
import os
import time
from typing import Any

from raytf.config import RunConfig, ScalingConfig
from raytf.errors import (
    PlacementTimeoutError,
    PortClashError,
    TrainingFailedError,
    WorkerDiedError,
    WorkerError,
    WorkerSetupError,
)
from raytf.progress import Progress
from raytf.result import Result
from raytf.run_state import RunState
from raytf.worker import FAILED, FINISHED, WorkerPoll
from raytf.worker_group import WorkerGroup

logger = logging.getLogger("raytf")

POLL_INTERVAL_S = float(os.environ.get("RAYTF_POLL_INTERVAL_S", "0.2"))
MAX_PORT_RETRIES = int(os.environ.get("RAYTF_MAX_PORT_RETRIES", "3"))

# Errors a worker sees because a *peer* failed: reported only if nothing better is known.
_COLLATERAL = {"AbortedError", "UnavailableError", "CancelledError", "DeadlineExceededError"}


class State(enum.Enum):
    SCHEDULING = "SCHEDULING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    ERRORED = "ERRORED"

    @property
    def is_terminal(self) -> bool:
        return self in (State.FINISHED, State.ERRORED)


def pick_root_cause(errors: list[BaseException]) -> BaseException:
    """The error to show: a user's own exception beats a peer's collective abort."""
    for err in errors:
        if isinstance(err, WorkerError) and err.exc_type not in _COLLATERAL:
            return err
    for err in errors:
        if isinstance(err, WorkerDiedError):
            return err
    return errors[0]


class Controller:
    worker_group_cls = WorkerGroup

    def __init__(
        self,
        fn_ref: Any,
        config: dict[str, Any],
        scaling: ScalingConfig,
        run_config: RunConfig,
        progress: Progress,
    ):
        self.fn_ref = fn_ref
        self.config = config
        self.scaling = scaling
        self.run_config = run_config
        self.progress = progress
        self.run_dir = run_config.run_dir
        self.group: WorkerGroup | None = None
        self.attempt = 0
        self.port_retries = 0
        self.history: list[dict[str, Any]] = []
        self.worker_results: list[Any] = [None] * scaling.num_workers
        self.finished_ranks: set[int] = set()
        self.error: BaseException | None = None
        self.status = RunState(
            name=run_config.name, run_dir=self.run_dir, num_workers=scaling.num_workers
        )
        self.started = time.monotonic()

    # -- the loop -----------------------------------------------------------
    def run(self) -> Result:
        state = State.SCHEDULING
        try:
            while not state.is_terminal:
                state = self._step(state)
                self._save(state)
        finally:
            self._teardown()
        return self._result(state)

    def _step(self, state: State) -> State:
        handler = {
            State.SCHEDULING: self._schedule,
            State.STARTING: self._start,
            State.RUNNING: self._poll,
        }[state]
        return handler()

    # -- states ---------------------------------------------------------------
    def _schedule(self) -> State:
        self.attempt += 1
        self.group = self.worker_group_cls(
            self.scaling, run_name=self.run_config.name, attempt=self.attempt
        )
        try:
            self.group.place(self.run_config.placement_timeout_s, self.progress.waiting)
        except PlacementTimeoutError as exc:
            return self._fail(exc)
        return State.STARTING

    def _start(self) -> State:
        assert self.group is not None
        t0 = time.monotonic()
        try:
            self.group.start_actors()
            replicas = self.group.setup(self.run_config.setup_timeout_s)
        except PortClashError as exc:
            self._teardown()
            self.port_retries += 1
            if self.port_retries > MAX_PORT_RETRIES:
                return self._fail(exc)
            self.progress.message(f"port clash at start-up ({exc}); starting on new ports")
            return State.SCHEDULING
        except WorkerSetupError as exc:
            return self._fail(exc)
        self._record_workers("running")
        self.group.run(self.fn_ref, self.config, self.run_dir)
        nodes = len({info.node_id for info in self.group.infos})
        self.progress.message(
            f"{self.scaling.num_workers} workers on {nodes} node(s), {replicas} replicas in sync, "
            f"started in {time.monotonic() - t0:.1f} s"
        )
        return State.RUNNING

    def _poll(self) -> State:
        assert self.group is not None
        polls = self.group.poll()
        errors: list[BaseException] = []
        for rank, poll in enumerate(polls):
            if isinstance(poll, WorkerDiedError):
                errors.append(poll)
            elif isinstance(poll, WorkerPoll):
                self._take_reports(poll)
                if poll.state == FAILED:
                    errors.append(poll.error)
                elif poll.state == FINISHED and rank not in self.finished_ranks:
                    self.finished_ranks.add(rank)
                    self.worker_results[rank] = poll.result
        if errors:
            return self._fail(pick_root_cause(errors), errors)
        if len(self.finished_ranks) == self.scaling.num_workers:
            return State.FINISHED
        time.sleep(POLL_INTERVAL_S)
        return State.RUNNING

    # -- helpers --------------------------------------------------------------
    def _take_reports(self, poll: WorkerPoll) -> None:
        if not poll.reports:
            return
        for report in poll.reports:
            if report.rank == 0:
                self.history.append(report.metrics)
        step = poll.reports[-1].metrics.get("step")
        if step is not None:
            self.status.workers[poll.rank]["last_step"] = step
            if poll.rank == 0:
                self.status.last_step = step
        self.progress.on_reports(poll.reports)

    def _fail(self, cause: BaseException, all_errors: list[BaseException] | None = None) -> State:
        self.error = cause
        self.status.failures.append(
            {"attempt": self.attempt, "cause": f"{type(cause).__name__}: {cause}"}
        )
        others = [e for e in (all_errors or []) if e is not cause]
        if others:
            logger.debug("other errors in the same poll: %s", others)
        return State.ERRORED

    def _record_workers(self, state: str) -> None:
        assert self.group is not None
        self.status.workers = [
            {
                "rank": info.rank,
                "node_ip": info.node_ip,
                "node_id": info.node_id,
                "pid": info.pid,
                "port": info.port,
                "gpu_ids": list(info.gpu_ids),
                "state": state,
                "last_step": None,
            }
            for info in self.group.infos
        ]

    def _save(self, state: State) -> None:
        self.status.state = state.value
        self.status.attempt = self.attempt
        if state.is_terminal:
            for worker in self.status.workers:
                worker["state"] = "finished" if state is State.FINISHED else "stopped"
        self.status.save()

    def _teardown(self) -> None:
        if self.group is not None:
            self.group.shutdown()
            self.group = None

    def _result(self, state: State) -> Result:
        elapsed = time.monotonic() - self.started
        result = Result(
            metrics=self.history[-1] if self.history else {},
            metrics_history=self.history,
            path=self.run_dir,
            attempts=self.attempt,
            elapsed_s=elapsed,
            worker_results=self.worker_results,
            error=self.error,
        )
        if state is State.FINISHED:
            self.progress.finish(f"finished in {elapsed:.1f} s, {self.attempt} attempt(s)")
            return result
        err = self.error
        self.progress.finish(f"failed after {elapsed:.1f} s: {err}")
        message = f"training failed: {err}"
        if isinstance(err, WorkerError):
            message += f"\n\nTraceback from rank {err.rank}:\n{err.traceback_text}"
        failure = TrainingFailedError(message, [err] if err else [])
        failure.result = result  # type: ignore[attr-defined]
        raise failure from err
