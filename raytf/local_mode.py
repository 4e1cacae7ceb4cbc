"""Local mode: ``ScalingConfig(num_workers=0)`` runs the training function in this process.

For debugging with a plain debugger: no Ray, no worker actor, no MWMS. The
loop sees the same context API as on a worker (``raytf.get_context()``:
strategy, rank 0 of 1, config, run directory, ``report``, ``restore``,
``step_end``), with a one-device strategy (the first GPU when ``use_gpu`` and
one is visible, else the CPU). Checkpoints are written and committed as in a
run (pruned, scored, told to ``RunConfig.callbacks``), so a local run resumes
from its last checkpoint, its run directory has the same layout (``raytf
status`` reads it) and a finished run leaves its ``model/model.keras``. Ray
Data inputs are refused: they need a cluster.

A thin composition: the rank's side is a worker's own (``raytf.worker.host``:
checkpointer, context, final save), the driver's side the controller's pieces
(``CheckpointCommits``, callbacks, ``RunState``), and the ``Result`` comes from
the same builder as a cluster run's (``raytf.driver.outcome``).
"""

from __future__ import annotations

import socket
import time
from dataclasses import replace
from typing import Any

from raytf.checkpoint.commits import CheckpointCommits
from raytf.driver.callbacks import DriverCallbacks
from raytf.driver.outcome import RunRecord, build_result
from raytf.driver.run_dir_hold import hold_run_dir
from raytf.errors import ConfigError
from raytf.messages import RUNNING, CheckpointPart, Report, WorkerPoll
from raytf.observe import RunRecorder
from raytf.result import Result
from raytf.rundir.run_state import RunState
from raytf.rundir.storage import Storage, check_storage
from raytf.settings import Settings
from raytf.worker.host import RankHost


def one_device_strategy(use_gpu: bool) -> Any:
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU") if use_gpu else []
    return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")


class LocalRun:
    """A local run that holds its run directory (the lease, as a cluster run's driver
    does at its start: ``start_fresh`` has set the earlier files aside) until ``run``
    ends it. ``writer``: the run directory's ``StateWriter``, as a controller's."""

    def __init__(self, fn: Any, config: dict, scaling: Any, run_config: Any, datasets: dict):
        if datasets:
            raise ConfigError(
                "ScalingConfig(num_workers=0) runs in this process without Ray: Ray Data "
                "datasets need workers; read the data in the loop, or use num_workers=1"
            )
        check_storage(run_config.storage_path, run_config.run_dir)
        self.fn, self.config, self.scaling, self.run_config = fn, config, scaling, run_config
        self.settings = Settings.from_env()
        self.writer = hold_run_dir(run_config, self.settings, print)

    def run(self) -> Result:
        """Run the loop once in this process; the Result of a one-worker run, or the
        loop's error."""
        try:
            return _run_here(self.fn, self.config, self.scaling, self.run_config, self.writer)
        finally:
            self.writer.close(self.settings.final_state_write_s)  # the last state, the lease


def _run_here(fn: Any, config: dict, scaling: Any, run_config: Any, writer) -> Result:
    t0 = time.monotonic()
    run_dir = run_config.run_dir
    storage = Storage(run_dir)
    status = RunState.continuing(storage, name=run_config.name, run_dir=run_dir, scaling=scaling)
    status.attempt += 1
    host = RankHost()  # the loop's checkpointer, context and final save, as on a worker
    buffer = host.buffer
    events = DriverCallbacks([RunRecorder(storage, run_config.name), *run_config.callbacks])
    history: list[dict] = []

    def take_reports() -> None:
        reports = [item for item in buffer.drain() if isinstance(item, Report)]
        for item in reports:
            history.append(item.metrics)
            ckpts.note_report(item.metrics)
            events.emit("on_report", item.metrics)
        poll = WorkerPoll(0, RUNNING, reports=reports, total_steps=buffer.total_steps)
        events.emit("on_poll", status.attempt, poll)

    def on_commit(ckpt) -> None:
        status.checkpoints = ckpts.kept[-20:]
        events.emit("on_commit", ckpt)
        events.emit("on_checkpoint", ckpt.step, ckpt.path)

    def on_part(part: CheckpointPart) -> None:  # one rank: its part is the whole checkpoint
        take_reports()  # a checkpoint's score is the metric reported up to its step
        ckpts.on_parts([part], attempt=status.attempt)

    # The driver's commit bookkeeping (pruning, best checkpoints by score, callbacks),
    # under the run directory's lease and its generation, as a cluster run's.
    ckpts = CheckpointCommits(
        storage,
        run_config.checkpoint_config,
        1,
        on_commit,
        say=print,  # on screen, as a cluster run's driver says it
        holds=writer.holds_lease,
        holder=writer.stamp,
    )
    ckpts.new_attempt(1)
    ckpts.restore_point()
    # The cluster's plan, but saves on the loop's thread: a debugger stops threads too.
    plan = replace(ckpts.plan(), async_save=False)
    host.open(
        strategy=one_device_strategy(scaling.use_gpu),
        rank=0,
        world_size=1,
        local_rank=0,
        node_ip=socket.gethostbyname(socket.gethostname()),
        config=config,
        run_dir=run_dir,
        plan=plan,
        on_part=on_part,
    )  # no host copy is given: no other process will restore from this one's memory
    status.world_size = 1
    status.record(
        "RUNNING", attempt=status.attempt, preemptions=0, workers_ended=False, write=writer.put
    )
    error: BaseException | None = None
    value = None
    try:
        value = host.call(fn, watched=False)  # no liveness sampling: no driver polls it
    except BaseException as exc:  # noqa: BLE001 - raised below, as a run's failure is
        error = exc
    finally:
        host.close()
    take_reports()
    if error is None:
        host.end()  # the final model; a failed save is said, the finished run kept
    state = "FINISHED" if error is None else "ERRORED"
    status.last_step = buffer.step
    if error is not None:
        status.add_failure(status.attempt, "fatal", error, time.time())
        events.emit("on_failure", status.attempt, "fatal", error)
    events.emit("on_state", "RUNNING", state)
    events.close(state)
    status.record(
        state, attempt=status.attempt, preemptions=0, workers_ended=True, write=writer.put
    )
    record = RunRecord(
        state=state,
        run_dir=run_dir,
        attempts=status.attempt,
        elapsed_s=time.monotonic() - t0,
        history=history,
        worker_results=[value],
        checkpoint=ckpts.latest.path if ckpts.latest else None,
        best_checkpoints=ckpts.best_checkpoints(),
        error=error,
    )
    return build_result(record, failed=_failed)  # raises TrainingFailedError unless FINISHED


def _failed(record: RunRecord) -> str:
    error = record.error
    return f"local run failed: {type(error).__name__}: {error}"
