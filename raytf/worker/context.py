"""What a worker's code sees: its strategy, rank and config, and ``report``.

One context per worker process, set by the worker actor after it has created
the strategy. ``report`` only appends to an in-process buffer that the driver
drains by polling, so reporting costs the training loop nothing but a lock.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from raytf.messages import Command, Reply, Report
from raytf.worker.liveness import Liveness
from raytf.worker.report_values import clean_metrics


@dataclass
class _ReportBuffer:
    """What the worker has to tell the driver since the last poll, and what it was told."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    items: list[Any] = field(default_factory=list)
    step: int | None = None
    first_step_at: float | None = None  # wall time of the first step_end (start-up timeline)
    waiting: bool = False  # blocked on the next session command: idle, not hung
    beats: int = 0  # work that is not a training step (evaluation) shows it is alive
    liveness: Liveness = field(default_factory=Liveness)  # progress raytf sees for itself
    positions: dict = field(default_factory=dict)  # dataset -> (epoch, batches read)
    total_steps: int | None = None  # what the loop said it will run (status's ETA)
    commands: queue.Queue = field(default_factory=queue.Queue)
    # Set by what a held poll must not sit on (a checkpoint part, a reply, a shard's
    # epoch, the loop's end): ``RaytfWorker.poll`` answers at once then.
    news: threading.Event = field(default_factory=threading.Event)

    def put(self, item: Any) -> None:
        with self.lock:
            self.items.append(item)
        if not isinstance(item, Report):
            self.news.set()

    def drain(self) -> list[Any]:
        with self.lock:
            items, self.items = self.items, []
        return items


class TrainContext:
    """The worker's view of the run. Get it with ``raytf.get_context()``.

    Args:
        strategy: The worker's ``MultiWorkerMirroredStrategy`` (one-device in local mode).
        rank: This worker's rank, 0 to ``world_size - 1``; 0 is the chief.
        world_size: Workers in the group this attempt (an elastic group's may change).
        local_rank: This worker's index among the workers on its node.
        node_ip: The IP address of this worker's node.
        config: ``train_loop_config``, with a Tune trial's config merged over it.
        run_dir: The run directory, ``storage_path/name`` (a path or a URL).
        buffer: raytf's own: what the driver drains at each poll.
        checkpointer: raytf's own (None: no checkpoints). Default None.
        shards: raytf's own: this rank's Ray Data iterators. Default None.
        attempt: The run's attempt this context belongs to, from 1. Default 1.
    """

    def __init__(
        self,
        *,
        strategy: Any,
        rank: int,
        world_size: int,
        local_rank: int,
        node_ip: str,
        config: dict[str, Any],
        run_dir: str,
        buffer: _ReportBuffer,
        checkpointer: Any = None,
        shards: dict[str, Any] | None = None,
        attempt: int = 1,
    ):
        self.strategy = strategy
        self.attempt = attempt  # the run's attempt this context belongs to (1, 2, ...)
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.node_ip = node_ip
        self.config = config
        self.run_dir = run_dir
        self._buffer = buffer
        self._checkpointer = checkpointer
        self._iterators = dict(shards or {})
        self._shards: dict[str, Any] = {}
        self._step = 0  # the run's global step as this attempt knows it (``last_step``)
        # A line about what raytf's checkpoints hold of this loop was said, or the loop
        # keeps its state its own way (Ray Train's checkpoints): no other is needed.
        self.state_said = False

    @property
    def is_chief(self) -> bool:
        """Rank 0 is MWMS's chief: it writes summaries and, later, the real checkpoint."""
        return self.rank == 0

    @property
    def num_replicas(self) -> int:
        """Replicas across the whole group (workers x devices per worker)."""
        return int(self.strategy.num_replicas_in_sync)

    def report(self, metrics: dict[str, Any], *, examples: int | None = None) -> None:
        """Send metrics to the driver: history, progress display and the final Result.

        Call it from every worker at the same points (each worker's last report
        is kept for status); rank 0's reports form the history. ``examples`` is
        the number of examples the whole group processed since the last report;
        the driver turns it into examples/s. A ``step`` key drives the progress line.

        Args:
            metrics: Name to a number, string, bool, list of them or scalar tensor.
            examples: Examples the whole group processed since the last report. Default
                None: no throughput.

        Raises:
            TypeError: ``metrics`` is not a dict, or a value is none of those types; at
                ``fit()``, a ``WorkerError`` cause of ``TrainingFailedError``.
        """
        clean = clean_metrics(metrics, self.rank)
        self._buffer.put(Report(self.rank, clean, examples, time.time()))
        self._buffer.liveness.progressed()
        if "step" in clean:
            self._say_if_no_state()

    def _say_if_no_state(self) -> None:
        """At the loop's first step: a loop that named no state (no ``restore``) is
        checkpointed by nothing, and a lost worker restarts it from its first step."""
        if self.state_said or self._checkpointer is None:
            return
        self.state_said = True
        if self.is_chief and not self.is_tracking():
            print(
                "[raytf] this loop names no state to raytf's checkpoints: a lost worker "
                "restarts it from its first step. Name it with ctx.restore(model=..., "
                "optimizer=...) and call ctx.step_end(step) after each step to resume "
                "where it was (the quick start's loop shows both)",
                flush=True,
            )

    def get_dataset_shard(self, name: str) -> Any:
        """This rank's shard of the trainer's dataset ``name`` (a ``raytf.DataShard``).

        ``shard.to_tf(features, labels, global_batch_size=B)`` reads it as a
        ``tf.data.Dataset`` of per-replica batches, one epoch per iteration.

        Args:
            name: A key of the trainer's ``datasets``.

        Raises:
            KeyError: The trainer has no dataset ``name``.
        """
        if name not in self._shards:
            if name not in self._iterators:
                given = sorted(self._iterators) or "none"
                raise KeyError(
                    f"no dataset named {name!r}: the trainer's datasets are {given} "
                    "(Trainer(datasets={...}))"
                )
            from raytf.data.shard import DataShard

            self._shards[name] = DataShard(
                name,
                self._iterators[name]["iterator"],
                schema=self._iterators[name]["schema"],
                rank=self.rank,
                num_replicas=self.num_replicas,
                on_epoch=self._buffer.put,
                position=self._buffer.positions,
            )
        return self._shards[name]

    def restore(self, **trackables: Any) -> int:
        """Name what a checkpoint holds (model, optimizer, ...) and restore it when resuming.

        Returns the global step the run resumes after: 0 for a fresh run, N when
        the latest committed checkpoint was taken after step N. Position the input
        pipeline by this step (a distributed iterator cannot be checkpointed,
        tensorflow#56372). Python's and NumPy's global RNG states are saved and
        restored per rank as well.

        Args:
            **trackables: TF trackables by name (``model=m, optimizer=opt``), alike on every rank.

        Returns:
            The global step to resume after: 0 for a fresh run.

        Raises:
            RuntimeError: ``restore`` was already called in this worker.
            CheckpointMismatchError: The checkpoint does not fit these objects; at
                ``fit()``, the cause of a ``TrainingFailedError``, never retried.
        """
        if self._checkpointer is None:
            return 0
        step = self._checkpointer.track(trackables)
        self._step = max(self._step, step)
        return step

    @property
    def last_step(self) -> int:
        """The run's global step so far: the newest one handed to ``step_end`` or
        ``checkpoint_now`` in this attempt, else the step ``restore`` resumed after, else 0.

        raytf's own step labels (a Keras ``fit`` with no raytf callback) count on from
        it, so they never repeat across ``fit`` calls, recompiles or second models:
        ``optimizer.iterations`` is not a batch count (a new optimizer starts at 0, a
        loss-scale optimizer skips, gradient accumulation divides it)."""
        return self._step

    def is_tracking(self) -> bool:
        """Has ``restore`` named what this worker's checkpoints hold? (Once per worker.)"""
        return self._checkpointer is not None and self._checkpointer.ckpt is not None

    def add_checkpoint_state(self, name: str, get: Any, set_: Any) -> None:
        """Keep JSON-able per-rank state (``get()`` / ``set_(value)``) in every checkpoint.

        For state TF's checkpoint does not hold, such as Keras metric
        accumulators in mid-epoch. Call before ``restore``.

        Args:
            name: The state's key in the checkpoint; unique in the run.
            get: Called at each save with no argument; returns a JSON-able value.
            set_: Called at ``restore`` with the value saved, when a checkpoint has one.
        """
        if self._checkpointer is not None:
            self._checkpointer.add_state(name, get, set_)

    def checkpoint_now(self, step: int, reason: str = "session") -> None:
        """Save at ``step`` now; every rank must call it at the same step.

        Args:
            step: The global step just finished, the checkpoint's label.
            reason: Why, as the run's records show it. Default ``"session"``.

        Raises:
            RuntimeError: This worker has no checkpointer.
        """
        if self._checkpointer is None:
            raise RuntimeError("checkpoints are not set up on this worker")
        self._buffer.step = self._step = int(step)
        self._checkpointer.save_now(int(step), reason)

    def heartbeat(self) -> None:
        """Tell the driver's watchdog this rank is busy between steps (e.g. evaluating)."""
        self._buffer.beats += 1
        self._buffer.liveness.progressed()

    def slow_phase(self, name: str, limit_s: float | None = None):
        """``with ctx.slow_phase("building the index", limit_s=3600):`` -- a phase of the
        loop's own that makes no progress the driver can see, timed against ``limit_s``
        (default ``FailureConfig.phase_timeout_s``) instead of ``hang_timeout_s``.

        Args:
            name: What the phase does, as a hang report names it.
            limit_s: Seconds before a ``WorkerHangError``. Default None: ``phase_timeout_s``.

        Returns:
            (contextlib.AbstractContextManager): The phase lasts for its ``with`` block.
        """
        return self._buffer.liveness.phase(name, limit_s)

    def next_command(self) -> Command:
        """Block until the driver's interactive session sends the next command."""
        self._buffer.liveness.progressed()  # between commands a session is idle, not starting
        self._buffer.waiting = True
        try:
            return self._buffer.commands.get()
        finally:
            self._buffer.waiting = False

    def reply(self, command_id: int, value: Any) -> None:
        """Answer one session command; the driver waits for every rank's answer.

        Args:
            command_id: The ``Command.id`` of the command answered.
            value: The answer: anything Ray can serialize.
        """
        self._buffer.put(Reply(self.rank, int(command_id), value))
        self._buffer.liveness.progressed()

    def set_total_steps(self, steps: int) -> None:
        """The step the loop will stop at, when it knows: ``raytf status`` shows an ETA.

        Args:
            steps: The global step the loop ends at.
        """
        self._buffer.total_steps = int(steps)

    def step_end(self, step: int, *, resumable: bool = True) -> None:
        """Call after every training step with the global step just finished.

        This is where a checkpoint the driver asked for is taken (every rank at
        the same step), and how the driver's watchdog sees progress. It costs a
        lock when no checkpoint is due. ``resumable=False`` marks a step the loop
        cannot resume from (inside a Keras ``fit`` epoch): a save the driver asks
        for, or an emergency one, waits for the next resumable step.

        Args:
            step: The global step just finished (on from the one ``restore`` returned).
            resumable: Whether the loop can resume after this step. Default True.
        """
        self._buffer.step = self._step = int(step)
        self._buffer.liveness.progressed()
        self._say_if_no_state()
        if self._buffer.first_step_at is None:
            self._buffer.first_step_at = time.time()
        if self._checkpointer is not None:
            self._checkpointer.step_end(int(step), resumable)


_current: TrainContext | None = None


def _set_context(ctx: TrainContext | None) -> None:
    global _current
    _current = ctx


def get_context() -> TrainContext:
    """The running worker's context; only valid inside ``train_loop_per_worker``.

    Returns:
        This worker's ``TrainContext``.

    Raises:
        RuntimeError: Not inside a loop raytf started (on the driver, say).
    """
    if _current is None:
        raise RuntimeError(
            "raytf.get_context() is only available inside train_loop_per_worker, "
            "on a worker started by raytf.Trainer"
        )
    return _current


def step_end(step: int) -> None:
    """Shortcut for ``get_context().step_end(step)``.

    Args:
        step: The global step just finished (see ``TrainContext.step_end``).
    """
    get_context().step_end(step)


def get_dataset_shard(name: str) -> Any:
    """Shortcut for ``get_context().get_dataset_shard(name)``.

    Args:
        name: A key of the trainer's ``datasets``.

    Returns:
        This rank's ``DataShard`` of that dataset.

    Raises:
        KeyError: The trainer has no dataset ``name``.
    """
    return get_context().get_dataset_shard(name)


def slow_phase(name: str, limit_s: float | None = None):
    """Shortcut for ``get_context().slow_phase(...)``.

    Args:
        name: What the phase does, as a hang report names it.
        limit_s: Seconds it may take. Default None: ``FailureConfig.phase_timeout_s``.
    """
    return get_context().slow_phase(name, limit_s)


def report(metrics: dict[str, Any], *, examples: int | None = None) -> None:
    """Shortcut for ``get_context().report(...)``.

    Args:
        metrics: Metric name to a number, string, bool, list of them or scalar tensor.
        examples: Examples the whole group processed since the last report. Default None.

    Raises:
        TypeError: A value is none of those types.
    """
    get_context().report(metrics, examples=examples)
