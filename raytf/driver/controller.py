"""The driver's control loop, as an explicit state machine.

    SCHEDULING -> STARTING, RESTARTING, ERRORED
    STARTING -> RUNNING, SCHEDULING, RESTARTING, ERRORED
    RUNNING -> RUNNING, RESTARTING, FINISHED, ERRORED
    RESTARTING -> SCHEDULING, ERRORED
    any state -> STOPPED

SCHEDULING places the slots (ERRORED: placement timed out, or a node's storage
refused; RESTARTING: a node's storage check did not run). STARTING wires the
actors (SCHEDULING again on a port clash; RESTARTING when set-up fails; ERRORED
past ``max_port_retries`` or when the user's code cannot load). RUNNING polls
(RESTARTING on a failure, hang, preemption or resize; ERRORED on a data-shard
mismatch a retry would repeat, on storage unwritable past
``Settings.storage_outage_s``, or on the run's lease taken over by another
driver: ``StateWriter.halt``). RESTARTING asks the failure policy. STOPPED is
``request_stop`` (a Tune scheduler ended the trial), or a SIGTERM or SIGINT to
the driver after its stop checkpoint (``raytf.driver.signal_stop``).
``state.json`` goes through a ``StateWriter``, off this loop, so a full disk or
an object store away never stops it (``raytf.driver.run_dir_hold``).
``states.TRANSITIONS`` holds this diagram; the loop refuses any other step.

A RESTARTING state carries its reason (a ``Failure`` or a ``Restart``). A
restart replaces the whole group (a strategy cannot be re-made in a live
process) and resumes from the latest committed checkpoint. Policies decide
(failure, resize, watchdog, checkpoint commits), the controller acts: it
alone calls the group, the pool and the run's state. Every collaborator comes
in through the constructor (tests pass fakes: ``raytf.group.protocols``);
what it does is told to ``RunConfig.callbacks`` through a queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from raytf.checkpoint.commits import CheckpointCommits
from raytf.config import RunConfig, ScalingConfig
from raytf.data.feed import DataFeed
from raytf.driver.callbacks import DriverCallbacks
from raytf.driver.failure_actions import emergency_checkpoint, root_cause
from raytf.driver.failure_policy import Decision, Failure, FailurePolicy, failures_in_a_row
from raytf.driver.hang_report import explain_hang
from raytf.driver.listeners import Listeners
from raytf.driver.outcome import RunRecord, build_result
from raytf.driver.outputs import Outputs
from raytf.driver.poll_intake import PollIntake
from raytf.driver.progress import Progress
from raytf.driver.resize_policy import ResizeDecision, ResizePolicy, Restart
from raytf.driver.round_times import RoundTimes
from raytf.driver.signal_stop import SignalStop
from raytf.driver.states import TRANSITIONS, Next, State, outranking
from raytf.driver.watchdog import Watchdog
from raytf.errors import (
    CheckpointRestoreError,
    CheckpointStorageError,
    ConfigError,
    DataShardError,
    PlacementTimeoutError,
    PortClashError,
    UserCodeLoadError,
    WorkerDiedError,
    WorkerSetupError,
)
from raytf.group.pool import WorkerPool
from raytf.group.protocols import Group, Pool
from raytf.group.worker_group import WorkerGroup
from raytf.messages import FAILED, FINISHED, Command, WorkerPoll
from raytf.observe import RunRecorder
from raytf.result import Result
from raytf.rundir.run_state import RunState
from raytf.rundir.state_writer import StateWriter
from raytf.rundir.storage import Storage, retrying
from raytf.settings import Settings


class Controller(PollIntake):
    def __init__(
        self,
        fn_ref: Any,
        config: dict[str, Any],
        scaling: ScalingConfig,
        run_config: RunConfig,
        progress: Progress,
        *,
        data: DataFeed | None = None,
        listeners: Listeners | None = None,
        placement_group: Any = None,
        group_cls: Callable[..., Group] = WorkerGroup,
        pool_cls: Callable[..., Pool] = WorkerPool,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.monotonic,
        writer: StateWriter | None = None,
    ):
        self.fn_ref, self.config, self.scaling = fn_ref, config, scaling
        self.run_config, self.progress = run_config, progress
        self.data = data or DataFeed({}, scaling.global_batch_size)
        self.listeners = listeners or Listeners()
        self.storage = Storage(run_config.run_dir)
        recorder = RunRecorder(self.storage, run_config.name)  # metrics.jsonl, logs/, metrics
        self.events = DriverCallbacks([recorder, *run_config.callbacks])
        self.placement_group = placement_group  # a Tune trial's: the workers go in its bundles
        self.group_cls, self.pool_cls = group_cls, pool_cls
        self.settings = settings or Settings.from_env()
        self.clock = clock
        self.run_dir = run_config.run_dir
        # state.json and the lease's heartbeat, off this loop (raytf.driver.run_dir_hold).
        self.writer = writer or StateWriter(self.storage, say=progress.message)
        self.stopper = SignalStop(self.settings.stop_checkpoint_wait_s)
        self.world_size = scaling.max_workers  # the size of the current attempt
        self.ckpts = CheckpointCommits(
            self.storage,
            run_config.checkpoint_config,
            self.world_size,
            self._on_commit,
            say=progress.message,
            holds=self.writer.holds_lease,
            holder=self.writer.stamp,
        )
        self.policy = FailurePolicy(run_config.failure_config)
        self.group: Group | None = None
        self.pool: Pool | None = None
        fc = run_config.failure_config
        self.use_standbys = fc.standby_workers and fc.recovers
        self.use_emergency = self.policy.uses_emergency(ray_data=bool(self.data.datasets))
        self._standbys_asked = False
        self.port_retries = self.preemptions = 0
        self.outputs = Outputs()
        self.failures: list[Failure] = []
        self.error: BaseException | None = None
        self.status = RunState.continuing(
            self.storage, name=run_config.name, run_dir=self.run_dir, scaling=scaling
        )
        self.resizer = ResizePolicy(scaling, self.settings)
        self.attempt = self.status.attempt
        self.started = self.clock()
        self.watchdog = Watchdog(run_config.failure_config, self.started)
        self._beats: dict[int, tuple[int, int]] = {}
        self.rounds = RoundTimes()
        self._stop_requested = False

    def request_stop(self) -> None:
        """End the run at the next state change, tearing the group down (thread-safe)."""
        self._stop_requested = True

    def send_command(self, command: Command) -> bool:
        """Hand one session command to every rank; False when no group is running."""
        group = self.group
        if group is None:
            return False
        group.send_command(command)
        return True

    # -- the loop -----------------------------------------------------------
    def run(self) -> Result:
        nxt = Next(State.SCHEDULING)
        self.stopper.install()
        try:
            while not nxt.state.is_terminal:
                new = self._on_signal(nxt) if self.stopper.signum else None
                if new is None:
                    new = Next(State.STOPPED) if self._stop_requested else self._step(nxt)
                if new.state is not nxt.state:
                    self.events.state(nxt.state.value, new.state.value, self.attempt)
                nxt = new
                self._save(nxt.state)
        finally:
            self.stopper.uninstall()
            self._teardown()
            if self.pool is not None:
                self.pool.close()
                self.pool = None
            self.events.close(nxt.state.value)
            self.writer.close(self.settings.final_state_write_s)
        result = build_result(self.record(nxt.state), self.progress.finish)  # or raises
        if nxt.state is State.STOPPED:
            self.stopper.reraise()  # SIGTERM: SystemExit(143); SIGINT: KeyboardInterrupt
        return result

    def _on_signal(self, nxt: Next) -> Next | None:
        """SIGTERM or SIGINT: a checkpoint first (while running), then STOPPED; None: awaited."""
        if nxt.state is not State.RUNNING or self.group is None:
            return Next(State.STOPPED)
        if self.stopper.deadline is None:
            self.group.request_checkpoint("stop")
        committed = self.ckpts.latest.step if self.ckpts.latest else None
        line, stop = self.stopper.turn(committed, self.clock())
        if line:
            self.progress.message(line)
        return Next(State.STOPPED) if stop else None

    def _step(self, nxt: Next) -> Next:
        handler = {
            State.SCHEDULING: self._schedule,
            State.STARTING: self._start,
            State.RUNNING: self._poll,
            State.RESTARTING: lambda: self._restart(nxt.reason),
        }[nxt.state]
        new = handler()
        if new.state not in TRANSITIONS[nxt.state]:
            raise AssertionError(f"undeclared transition {nxt.state.value} -> {new.state.value}")
        return new

    # -- states ---------------------------------------------------------------
    def _schedule(self) -> Next:
        self.attempt += 1
        if self.pool is None:
            self.pool = self.pool_cls(
                self.scaling, run_name=self.run_config.name, placement_group=self.placement_group
            )
        self.group = self.group_cls(self.scaling, pool=self.pool, attempt=self.attempt)
        self._standbys_asked = False
        try:
            size = self.group.place(self.run_config.placement_timeout_s, self.progress.waiting)
        except (PlacementTimeoutError, ConfigError, WorkerSetupError) as exc:  # storage checks
            return self._on_failure(exc) if isinstance(exc, WorkerSetupError) else self._fail(exc)
        self.world_size = size.workers
        self._execute(self.resizer.placed(size, self.pool.lost_nodes))
        return Next(State.STARTING)

    def _start(self) -> Next:
        assert self.group is not None
        t0 = self.clock()
        try:
            self.group.start_actors()
            replicas = self.group.setup(self.run_config.setup_timeout_s)
        except PortClashError as exc:
            self._teardown()
            self.port_retries += 1
            if self.port_retries > self.settings.max_port_retries:
                return self._fail(exc)
            self.progress.message(f"port clash at start-up ({exc}); starting on new ports")
            return Next(State.SCHEDULING)
        except WorkerSetupError as exc:
            return self._on_failure(exc)
        try:  # a store that fails must not look like no checkpoint (a start from step 0)
            restore = retrying(self.ckpts.restore_point, "finding the newest checkpoint")
        except Exception as exc:  # noqa: BLE001 - the store, after its retries
            return self._on_failure(CheckpointStorageError(self.run_dir, f"{exc!r}"))
        restored = restore.step if restore else 0
        self.status.last_step = restored
        self.outputs.new_attempt(self.world_size, restored)
        self._execute(self.resizer.started(self.attempt, restored))
        self.ckpts.new_attempt(self.world_size)
        self.status.set_workers(self.group.infos, "running")
        try:
            shards = self.data.start_attempt(self.world_size, self.progress.message)
            every = self.policy.config.emergency_every_steps
            plan = self.ckpts.plan(self.use_emergency, every)
            self.group.run(self.fn_ref, self.config, self.run_dir, plan, shards)
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
        return Next(State.RUNNING)

    def _poll(self) -> Next:
        assert self.group is not None
        if (halt := self.writer.halt(self.settings.storage_outage_s)) is not None:
            return self._fail(halt)  # before any commit or prune: the run dir is not ours
        now = self.clock()
        cpu0 = time.thread_time()
        errors: list[BaseException] = []
        restart: Restart | None = None
        for rank, poll in enumerate(self.group.poll(self.settings.poll_interval_s)):
            if isinstance(poll, WorkerDiedError):
                errors.append(poll)
            elif isinstance(poll, WorkerPoll):
                restart = outranking(restart, self._take(poll, now))
                if poll.state == FAILED:
                    errors.append(poll.error)
                elif poll.state == FINISHED and (late := self.outputs.finished(rank, poll)):
                    self.progress.message(late)
        self._after_polls()
        if self.data.error is not None:
            return self._fail(self.data.error)  # the same data splits the same way again
        if errors:
            root = root_cause(self.group, errors, self.settings.collateral_grace_s)
            if self.use_emergency:  # commit the survivors' state at their last common step
                args = (self.world_size, self.attempt, self.settings)
                if line := emergency_checkpoint(self.group, self.ckpts, root, errors, *args):
                    self.progress.message(line)
            return self._on_failure(root)
        if restart is not None:
            return Next(State.RESTARTING, restart)
        if self.outputs.all_finished(self.world_size):
            return Next(State.FINISHED)
        hang = self.watchdog.check(now, self.group.silent_ranks)
        if hang is not None:  # each rank's stacks, read before the group is torn down
            where = (self.group.infos, self.storage, self.attempt, self.watchdog.silent)
            return self._on_failure(explain_hang(hang, *where))
        if self.ckpts.time_due(now):
            self.group.request_checkpoint("time")
        group, pool = self.group, self.pool
        self._execute(self.resizer.poll(now, group.draining_nodes, pool.growth))
        self.rounds.add(self.clock() - now, time.thread_time() - cpu0)
        # Each poll is an actor call that takes the worker's GIL: keep them few.
        time.sleep(max(0.0, self.settings.poll_interval_s - (self.clock() - now)))
        return Next(State.RUNNING)

    def _restart(self, reason: Failure | Restart | None) -> Next:
        self._teardown()
        self.watchdog.restart_began(self.clock())
        if reason is Restart.PREEMPTION:
            self.preemptions += 1
            self._execute(self.resizer.preempted())
            return Next(State.SCHEDULING)
        if reason is Restart.RESIZE:
            self.resizer.restarting(Restart.RESIZE.value)
            return Next(State.SCHEDULING)
        assert isinstance(reason, Failure)
        self.resizer.restarting(reason.kind.value.replace("_", " "))  # or "node lost", placed
        if isinstance(reason.cause, CheckpointRestoreError) and self.ckpts.latest:
            self.ckpts.mark_bad(self.ckpts.latest.step, reason.cause.detail)
        counted = sum(1 for f in self.failures if f.kind.counts)
        if self.policy.decide(reason, counted, failures_in_a_row(self.failures)) is Decision.RETRY:
            self.progress.message(self.policy.retry_line(reason, counted))
            return Next(State.SCHEDULING)
        self.error = reason.cause
        return Next(State.ERRORED)

    def _execute(self, decision: ResizeDecision) -> Restart | None:
        """Carry out what the resize policy decided; the restart it calls for, if any."""
        for line in decision.say:
            self.progress.message(line)
        if decision.world_size is not None:
            self.status.world_size = decision.world_size
        if decision.drain is not None:
            self.status.preemption_log.append(dict(decision.drain))
        if decision.drain_committed and self.status.preemption_log:
            self.status.preemption_log[-1].update(decision.drain_committed)
        if decision.resize is not None:
            self.status.resizes.append(decision.resize.to_dict())
        if decision.request_checkpoint and self.group is not None:
            self.group.request_checkpoint(decision.request_checkpoint)
        if decision.warm_spares and self.pool.warm_spares(list(decision.warm_spares)):
            self._execute(self.resizer.spares_ready(decision.grow_to))
        if decision.evict:
            left = self.pool.evict(set(decision.evict))
            moved = f", leaving {len(left)} slot(s) on draining nodes" if left else ""
            self.progress.message(f"restarting the group after its termination checkpoint{moved}")
        return decision.restart

    # -- failure ----------------------------------------------------------------
    def _on_failure(self, cause: BaseException) -> Next:
        failure = Failure.of(cause, self.attempt, self.ckpts.latest)
        self.failures.append(failure)
        self.status.add_failure(failure.attempt, failure.kind.value, cause, failure.at)
        self.events.emit("on_failure", failure.attempt, failure.kind.value, cause)
        return Next(State.RESTARTING, failure)

    def _fail(self, cause: BaseException) -> Next:
        self.error = cause
        self.status.add_failure(self.attempt, "fatal", cause, time.time())
        self.events.emit("on_failure", self.attempt, "fatal", cause)
        return Next(State.ERRORED)

    # -- bookkeeping ------------------------------------------------------------
    def _save(self, state: State) -> None:
        self.status.record(
            state.value,
            attempt=self.attempt,
            preemptions=self.preemptions,
            workers_ended=state.is_terminal or state is State.RESTARTING,
            write=self.writer.put,
        )

    def _teardown(self) -> None:
        if self.group is not None:
            self.group.shutdown()
            self.group = None

    def record(self, state: State) -> RunRecord:
        """What the run did, for its ``Result`` (``raytf.driver.outcome``)."""
        return RunRecord(
            state=state.value,
            run_dir=self.run_dir,
            attempts=self.attempt,
            elapsed_s=self.clock() - self.started,
            history=self.outputs.history,
            worker_results=self.outputs.worker_results,
            checkpoint=self.ckpts.latest.path if self.ckpts.latest else None,
            best_checkpoints=self.ckpts.best_checkpoints(),
            error=self.error,
            failures=self.failures,
            recoveries_s=list(self.watchdog.recoveries_s),
            preemptions=self.preemptions,
            resizes=list(self.status.resizes),
            driver_round_ms=self.rounds.summary_ms(),
            stopped_by=self.stopper.name,
        )
