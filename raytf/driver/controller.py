"""The driver's control loop, as an explicit state machine.

    SCHEDULING -> STARTING -> RUNNING -> FINISHED
        ^   ^         |          |
        |   +---------+          v
        |  (port clash)     RESTARTING -> ERRORED
        +-----------------------+

    any state -> STOPPED  (``request_stop``: a Tune scheduler ended the trial)

Each state is one method that does its work and returns the next state;
``run`` only loops until a terminal state. A restart always replaces the whole
group (a strategy cannot be re-made in a live process) and resumes from the
latest committed checkpoint. Policies decide (``FailurePolicy``), the
controller acts.

An elastic group (``num_workers=(min, max)``) changes size only in
SCHEDULING: after a failure it runs on the slots still placed (never fewer
than min); while RUNNING it watches for slots placed again and, once spares
there have TF imported, asks for a checkpoint and restarts larger from it. A
drained node (preemption) gets a checkpoint before its deadline; the restart
then leaves that node. Those decisions live in ``resizing.Resizer``.
``worker_group_cls`` can be swapped for a fake so the transitions are tested
without Ray.
"""

from __future__ import annotations

import enum
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from raytf.config import RunConfig, ScalingConfig
from raytf.data.feed import DataFeed
from raytf.driver.checkpoint_commits import CheckpointCoordinator
from raytf.driver.failure_policy import (
    Decision,
    Failure,
    FailureKind,
    FailurePolicy,
    classify,
    failure_message,
    pick_root_cause,
)
from raytf.driver.progress import Progress
from raytf.driver.resize_policy import PREEMPTION, RESIZE, Resizer
from raytf.driver.round_times import RoundTimes
from raytf.driver.watchdog import Watchdog
from raytf.errors import (
    CheckpointRestoreError,
    DataShardError,
    PlacementTimeoutError,
    PortClashError,
    TrainingFailedError,
    UserCodeLoadError,
    WorkerDiedError,
    WorkerSetupError,
)
from raytf.group.pool import WorkerPool
from raytf.group.worker_group import WorkerGroup
from raytf.messages import FAILED, FINISHED, WorkerPoll
from raytf.result import Result
from raytf.rundir.run_state import RunState
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")

POLL_INTERVAL_S = float(os.environ.get("RAYTF_POLL_INTERVAL_S", "0.2"))
MAX_PORT_RETRIES = int(os.environ.get("RAYTF_MAX_PORT_RETRIES", "3"))
COLLATERAL_GRACE_S = float(os.environ.get("RAYTF_COLLATERAL_GRACE_S", "1.0"))
SLOW_DRIVER_S = 5.0  # a rank's finish seen this late is worth a line


class State(enum.Enum):
    SCHEDULING = "SCHEDULING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    FINISHED = "FINISHED"
    ERRORED = "ERRORED"
    STOPPED = "STOPPED"

    @property
    def is_terminal(self) -> bool:
        return self in (State.FINISHED, State.ERRORED, State.STOPPED)


class Controller:
    worker_group_cls = WorkerGroup
    worker_pool_cls = WorkerPool
    clock = staticmethod(time.monotonic)  # tests inject a fake clock

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
        self.storage = Storage(self.run_dir)
        self.world_size = scaling.max_workers  # the size of the current attempt
        self.ckpts = CheckpointCoordinator(
            self.storage, run_config.checkpoint_config, self.world_size
        )
        self.policy = FailurePolicy(run_config.failure_config)
        self.group: WorkerGroup | None = None
        self.pool: WorkerPool | None = None
        fc = run_config.failure_config
        self.use_standbys = fc.standby_workers and fc.max_failures != 0
        self._standbys_asked = False
        self.port_retries = 0
        self.history: list[dict[str, Any]] = []
        self.worker_results: list[Any] = []
        self.finished_ranks: set[int] = set()
        self.failures: list[Failure] = []
        self.error: BaseException | None = None
        self.restart_reason: Failure | str | None = None  # or PREEMPTION / RESIZE
        self.preemptions = 0
        self.status = RunState.continuing(
            self.storage, name=run_config.name, run_dir=self.run_dir, scaling=scaling
        )
        self.resizer = Resizer(scaling, self.status, progress)
        self.attempt = self.status.attempt
        self.started = self.clock()
        self.watchdog = Watchdog(run_config.failure_config, self.started)
        # An interactive session listens here for the workers' answers to its commands.
        self.on_reply: Callable[[Any], None] | None = None
        self._beats: dict[int, int] = {}
        self.rounds = RoundTimes()
        self.data = DataFeed({}, scaling.global_batch_size)  # Ray Data input: make_controller
        # A Tune trial: rank 0's reports go to Tune; the trial's placement group is used.
        self.on_report: Callable[[dict], None] | None = None
        self.placement_group: Any = None
        self._stop_requested = False

    def request_stop(self) -> None:
        """End the run at the next state change, tearing the group down (thread-safe)."""
        self._stop_requested = True

    # -- the loop -----------------------------------------------------------
    def run(self) -> Result:
        state = State.SCHEDULING
        try:
            while not state.is_terminal:
                new = State.STOPPED if self._stop_requested else self._step(state)
                if new is not state:
                    logger.debug("%s -> %s", state.value, new.value)
                state = new
                self._save(state)
        finally:
            t0 = self.clock()
            self._teardown()
            if self.pool is not None:
                self.pool.close()
                self.pool = None
            logger.debug("teardown took %.3f s", self.clock() - t0)
        return self._result(state)

    def _step(self, state: State) -> State:
        handler = {
            State.SCHEDULING: self._schedule,
            State.STARTING: self._start,
            State.RUNNING: self._poll,
            State.RESTARTING: self._restart,
        }[state]
        return handler()

    # -- states ---------------------------------------------------------------
    def _schedule(self) -> State:
        self.attempt += 1
        if self.pool is None:
            self.pool = self.worker_pool_cls(
                self.scaling, run_name=self.run_config.name, placement_group=self.placement_group
            )
        self.group = self.worker_group_cls(self.scaling, pool=self.pool, attempt=self.attempt)
        self._standbys_asked = False
        try:
            size = self.group.place(self.run_config.placement_timeout_s, self.progress.waiting)
        except PlacementTimeoutError as exc:
            return self._fail(exc)
        self.world_size = size.workers
        self.resizer.placed(size, self.pool.lost_nodes)
        return State.STARTING

    def _start(self) -> State:
        assert self.group is not None
        t0 = self.clock()
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
            return self._on_failure(exc)
        restore = self.ckpts.restore_point()
        restored = restore.step if restore else 0
        self.status.last_step = restored
        self._trim_history(restored)
        self.resizer.started(self.attempt, restored)
        self.ckpts.new_attempt(self.world_size)
        self.finished_ranks.clear()
        self.worker_results = [None] * self.world_size
        self._record_workers("running")
        ckpt_args = {
            "dir": self.ckpts.dir,
            "every_steps": self.run_config.checkpoint_config.checkpoint_every_steps,
            "restore_url": restore.path if restore else None,
        }
        try:
            shards = self.data.start_attempt(self.world_size, self.progress.message)
            self.group.run(self.fn_ref, self.config, self.run_dir, ckpt_args, shards)
        except (UserCodeLoadError, DataShardError) as exc:
            return self._fail(exc)
        except WorkerSetupError as exc:
            return self._on_failure(exc)
        nodes = len({info.node_id for info in self.group.infos})
        where = f", resuming after step {restore.step}" if restore else ""
        warm = f" ({self.group.promoted} from standbys)" if self.group.promoted else ""
        self.progress.message(
            f"attempt {self.attempt}: {self.world_size} workers on {nodes} node(s), "
            f"{replicas} replicas in sync, started in {self.clock() - t0:.1f} s{warm}{where}"
        )
        self.watchdog.attempt_started(self.clock(), restored)
        return State.RUNNING

    def _poll(self) -> State:
        assert self.group is not None
        now = self.clock()
        cpu0 = time.thread_time()
        errors: list[BaseException] = []
        for rank, poll in enumerate(self.group.poll(POLL_INTERVAL_S)):
            if isinstance(poll, WorkerDiedError):
                errors.append(poll)
            elif isinstance(poll, WorkerPoll):
                self._take(poll, now)
                if poll.state == FAILED:
                    errors.append(poll.error)
                elif poll.state == FINISHED and rank not in self.finished_ranks:
                    self.finished_ranks.add(rank)
                    self.worker_results[rank] = poll.result
                    late = time.time() - (poll.ended_at or time.time())
                    if late > SLOW_DRIVER_S:
                        self.progress.message(f"driver: saw rank {rank} finish {late:.1f} s late")
        if self.data.error is not None:
            return self._fail(self.data.error)  # the same data splits the same way again
        if errors:
            root = pick_root_cause(errors)
            if classify(root) is FailureKind.COLLECTIVE:
                # A peer's broken collective is a symptom; its cause (a dead worker) is
                # usually a poll away. Look once more so the failure names the cause.
                more = [p for p in self.group.poll(COLLATERAL_GRACE_S) if p is not None]
                errors += [p for p in more if isinstance(p, WorkerDiedError)]
                errors += [p.error for p in more if isinstance(p, WorkerPoll) and p.error]
                root = pick_root_cause(errors)
            return self._on_failure(root)
        if self.restart_reason in (PREEMPTION, RESIZE):
            return State.RESTARTING
        if len(self.finished_ranks) == self.world_size:
            return State.FINISHED
        hang = self.watchdog.check(now, self.group.silent_ranks)
        if hang is not None:
            return self._on_failure(hang)
        if self.ckpts.time_due(now):
            self.group.request_checkpoint("time")
        self.resizer.poll(now, self.group, self.pool)
        self.rounds.add(self.clock() - now, time.thread_time() - cpu0)
        # Each poll is an actor call that takes the worker's GIL: keep them few.
        time.sleep(max(0.0, POLL_INTERVAL_S - (self.clock() - now)))
        return State.RUNNING

    def _restart(self) -> State:
        self._teardown()
        reason = self.restart_reason
        self.restart_reason = None
        self.watchdog.restart_began(self.clock())
        if reason == PREEMPTION:
            self.preemptions += 1
            self.resizer.preempted(self.pool)
            return State.SCHEDULING
        if reason == RESIZE:
            self.resizer.restarting("capacity returned")
            return State.SCHEDULING
        assert isinstance(reason, Failure)
        self.resizer.restarting(reason.kind.value.replace("_", " "))  # or "node lost", placed
        if isinstance(reason.cause, CheckpointRestoreError) and self.ckpts.latest:
            self.ckpts.mark_bad(self.ckpts.latest.step, reason.cause.detail)
        counted = sum(1 for f in self.failures if f.kind.counts)
        if self.policy.decide(reason, counted) is Decision.RETRY:
            limit = self.run_config.failure_config.max_failures
            shown = "unlimited" if limit == -1 else str(limit)
            self.progress.message(
                f"{reason.describe()} -> restarting the whole group "
                f"(failure {counted} of {shown} allowed)"
            )
            return State.SCHEDULING
        self.error = reason.cause
        return State.ERRORED

    # -- what the workers said ------------------------------------------------
    def _take(self, poll: WorkerPoll, now: float) -> None:
        for report in poll.reports:
            if report.rank == 0:
                self.history.append(report.metrics)
                if self.on_report is not None:
                    self.on_report(report.metrics)
        if poll.reports:
            self.progress.on_reports(poll.reports)
            self.watchdog.on_activity(now)
        if poll.waiting or poll.beats != self._beats.get(poll.rank):
            # A session between commands is idle, an evaluation busy: neither is hung.
            self._beats[poll.rank] = poll.beats
            self.watchdog.on_activity(now)
        if poll.step is not None:
            self.status.workers[poll.rank]["last_step"] = poll.step
            if poll.rank == 0 and poll.step != self.watchdog.last_step:
                self.status.last_step = poll.step
                took = self.watchdog.on_step(poll.step, now)
                if took is not None:
                    self.status.recoveries_s = [round(r, 3) for r in self.watchdog.recoveries_s]
                    self.status.resumed_at.append(time.time())
                    self.progress.message(
                        f"resumed at step {poll.step}, {took:.1f} s after the restart began"
                    )
                if self.use_standbys and not self._standbys_asked:
                    # Spares start importing TF now that training runs, not during start-up.
                    self._standbys_asked = True
                    self.pool.add_standbys()
        for ckpt in self.ckpts.on_parts(poll.parts, attempt=self.attempt):
            self.status.checkpoints = self.ckpts.committed_steps[-20:]
            if self.run_config.verbose >= 2:
                self.progress.message(f"committed checkpoint at step {ckpt.step}")
            why = self.resizer.committed(ckpt)
            if why is not None and (why == PREEMPTION or self.restart_reason is None):
                self.restart_reason = why
        if poll.notice:
            self.resizer.on_notice(poll.notice)
        self.data.on_poll(poll.rank, poll.shard_epochs, poll.positions)
        # Last: a session that asked for a checkpoint finds it committed when the answer comes.
        if poll.replies and self.on_reply is not None:
            for reply in poll.replies:
                self.on_reply(reply)

    # -- failure ----------------------------------------------------------------
    def _on_failure(self, cause: BaseException) -> State:
        failure = Failure(classify(cause), cause, self.attempt)
        self.failures.append(failure)
        self.status.add_failure(failure.attempt, failure.kind.value, cause, failure.at)
        self.restart_reason = failure
        return State.RESTARTING

    def _fail(self, cause: BaseException) -> State:
        self.error = cause
        self.status.add_failure(self.attempt, "fatal", cause, time.time())
        return State.ERRORED

    # -- bookkeeping ------------------------------------------------------------
    def _trim_history(self, step: int) -> None:
        """Rank 0's history after a resume: what happened after the restored step is redone."""
        self.history = [m for m in self.history if m.get("step", 0) <= step]

    def _record_workers(self, state: str) -> None:
        assert self.group is not None
        self.status.set_workers(self.group.infos, state)

    def _save(self, state: State) -> None:
        self.status.record(
            state.value,
            attempt=self.attempt,
            preemptions=self.preemptions,
            workers_ended=state.is_terminal or state is State.RESTARTING,
            storage=self.storage,
        )

    def _teardown(self) -> None:
        if self.group is not None:
            self.group.shutdown()
            self.group = None

    def _result(self, state: State) -> Result:
        elapsed = self.clock() - self.started
        latest = self.ckpts.latest
        result = Result(
            metrics=self.history[-1] if self.history else {},
            metrics_history=self.history,
            path=self.run_dir,
            attempts=self.attempt,
            elapsed_s=elapsed,
            worker_results=self.worker_results,
            checkpoint=latest.path if latest else None,
            error=self.error,
            failures=[f.describe() for f in self.failures],
            recoveries_s=list(self.watchdog.recoveries_s),
            preemptions=self.preemptions,
            resizes=list(self.status.resizes),
            driver_round_ms=self.rounds.summary_ms(),
        )
        if state is State.FINISHED:
            self.progress.finish(
                f"finished in {elapsed:.1f} s: attempt {self.attempt}, "
                f"{len(self.failures)} failure(s), {self.preemptions} preemption(s)"
            )
            return result
        if state is State.STOPPED:
            self.progress.finish(f"stopped on request after {elapsed:.1f} s")
            return result
        err = self.error
        self.progress.finish(f"failed after {elapsed:.1f} s: {err}")
        message = failure_message(err, self.failures)
        failure = TrainingFailedError(message, [f.cause for f in self.failures] or [err])
        failure.result = result  # type: ignore[attr-defined]
        raise failure from err
