"""The Ray actor hosting one MWMS worker process.

Every TensorFlow call of the process runs on one dedicated thread, in order:
MWMS must be the first TF op of a process and TF's eager context is happiest
on one thread. The actor's own methods stay free to answer ``poll`` while the
user's loop runs, which is how metrics stream to the driver without a queue
actor in between. TensorFlow is imported as soon as the actor starts, in the
background, so the 5-7 s import overlaps placement and port set-up.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor

import ray
from ray._private import ray_constants

from raytf import compat
from raytf.checkpoint.checkpointer import WorkerCheckpointer
from raytf.checkpoint.emergency import emergency_part
from raytf.checkpoint.host_copy import node_copy
from raytf.errors import (
    CheckpointMismatchError,
    CheckpointRestoreError,
    CheckpointStorageError,
    PortClashError,
    WorkerError,
)
from raytf.messages import (
    FAILED,
    FINISHED,
    IDLE,
    RUNNING,
    CheckpointPart,
    CheckpointPlan,
    Command,
    Reply,
    Report,
    SetupReply,
    ShardEpoch,
    WorkerInfo,
    WorkerPoll,
)
from raytf.rundir.storage import refresh_fsspec_env
from raytf.settings import Settings
from raytf.worker import liveness, own_strategy, patches
from raytf.worker.host import RankHost
from raytf.worker.process import environment
from raytf.worker.process.devices import cuda_visible_devices
from raytf.worker.process.output import OutputTap, tf_level
from raytf.worker.process.ports import is_port_clash, reserve_port
from raytf.worker.process.startup import WorkerTimes
from raytf.worker.user_fn import sendable

# A claimed kept process no driver has polled for this long lost its driver: it exits.
# Start-up calls come within seconds; a running group is polled every 0.2 s.
ORPHAN_S = 300.0


def _apply_log_level(default: int) -> None:
    """``LoggingConfig.log_level`` for the Python logging of this worker process; else
    ``default``, the level it started with (a kept process's starter may have set one)."""
    logging.getLogger().setLevel(os.environ.get("RAYTF_WORKER_LOG_LEVEL") or default)


def _import_tensorflow() -> None:
    import tensorflow  # noqa: F401  (import only: no op may run before MWMS exists)


class RaytfWorker:
    """One rank of the group. Created by WorkerGroup or WorkerPool, never by users.

    A worker created with ``rank=None`` is a standby: it holds no resources of
    its own (its placement-group bundle does), imports TensorFlow and waits.
    ``promote`` makes it a rank in a few milliseconds, which is what makes a
    restart fast: the 5-7 s of process start and TF import are already paid.
    """

    def __init__(
        self,
        rank: int | None,
        world_size: int,
        use_gpu: bool,
        gpus: int,
        env: dict,
        idle_s: float | None = None,
    ):
        self.rank = rank
        self.world_size = world_size
        self._gpu_ids: tuple[str, ...] = ()
        self._env_set = environment.apply(env)  # undone when a run claims a kept process
        # Before TensorFlow's import prints its start-up notes (raytf.worker.process.output).
        self._output = OutputTap()
        self._log_level = logging.getLogger().level  # the process's own, before the run's
        _apply_log_level(self._log_level)
        refresh_fsspec_env()  # the storage endpoint may have come with env
        ctx = ray.get_runtime_context()
        self._node_id = ctx.get_node_id()
        if rank is not None:
            ray_gpus = ctx.get_accelerator_ids().get("GPU", [])
            self._use_devices(tuple(str(g) for g in ray_gpus), use_gpu, gpus)
        self._times = WorkerTimes()
        self._tf = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raytf-tf")
        self._tf.submit(self._warm_up).add_done_callback(lambda _: self._times.stamp("tf_imported"))
        self._host = RankHost()  # the loop's checkpointer, context and final save
        self._buffer = self._host.buffer
        self._port_sock: socket.socket | None = None
        self._strategy = None
        self._compat = compat.ProbeReport(frozenset(), ())  # set with the strategy
        self._notes_unsent: tuple[str, ...] = ()
        self._checkpointer: WorkerCheckpointer | None = None
        self._run: Future | None = None
        self._ended_at: float | None = None
        self._claim = threading.Lock()
        self._contact = time.monotonic()  # when a driver last called (kept processes)
        self._claimed = idle_s is None  # a kept process waits for one run, then exits
        if idle_s is not None:
            threading.Thread(target=self._exit_if_idle, args=(idle_s,), daemon=True).start()

    def claim(self) -> bool:
        """A kept process is handed to one run only: True the first time, False after.

        Detached, it would outlive a driver killed before tearing its group down, so
        from now on it exits once no driver has called it for ``ORPHAN_S``.
        """
        with self._claim:
            if self._claimed:
                return False
            self._claimed = True
        self._contact = time.monotonic()
        threading.Thread(target=self._exit_if_orphaned, daemon=True).start()
        return True

    def _exit_if_orphaned(self) -> None:
        while time.monotonic() - self._contact < ORPHAN_S:
            time.sleep(5.0)
        os._exit(0)

    def _exit_if_idle(self, idle_s: float) -> None:
        time.sleep(idle_s)
        with self._claim:
            if not self._claimed:
                os._exit(0)  # nothing outlives its idle timeout, not even a detached actor

    # What a new process does on its TF thread before anything else. The
    # benchmark's control-plane test swaps these three for TF-free stand-ins.
    _warm_up = staticmethod(_import_tensorflow)

    def _start_watchers(self, checkpointer: WorkerCheckpointer) -> None:
        checkpointer.start_watchers()

    def __repr__(self) -> str:
        # Ray prefixes each line this actor prints with its repr: "(raytf rank=1 pid=...)".
        return "raytf standby" if self.rank is None else f"raytf rank={self.rank}"

    def _use_devices(self, gpu_ids: tuple[str, ...], use_gpu: bool, gpus: int) -> None:
        # Before TF initialises CUDA (at strategy creation), never after.
        os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices(gpu_ids, use_gpu, gpus)
        self._gpu_ids = gpu_ids if use_gpu else ()
        # Its output's pumps judge TF's CUDA lines by this (and the run's log level).
        self._output.settings(tf_level=tf_level(), has_gpus=bool(self._gpu_ids))

    def ping(self) -> int:
        return os.getpid()

    def describe(self) -> dict:
        """Where this process is and what it costs (``raytf pool list``)."""
        import resource

        return {
            "node_id": self._node_id,
            "pid": os.getpid(),
            "rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "tf_imported": "tf_imported" in self._times.stamps,
            "claimed": self._claimed,
        }

    def warm(self) -> int:
        """Answers once TensorFlow is imported: a spare is then ready to be promoted."""
        self._tf.submit(int).result()
        return os.getpid()

    def promote(
        self,
        rank: int,
        world_size: int,
        use_gpu: bool,
        gpu_ids: list[str] | None,
        env: dict | None = None,
    ) -> None:
        """Turn a standby or spare into ``rank``.

        ``gpu_ids`` are its bundle's GPUs for a zero-resource standby (Ray gave it
        none); None for a spare holding its bundle's resources itself. ``env`` is
        the run's worker environment, for a process kept from before the run
        (another driver started it: its storage settings may differ).
        """
        if self._strategy is not None:
            raise RuntimeError("a worker that already joined a strategy cannot be promoted")
        if env is not None:
            self._env_set = environment.replace(self._env_set, env)  # none of its starter's
            refresh_fsspec_env()
            _apply_log_level(self._log_level)
        if gpu_ids is None:
            ray_gpus = ray.get_runtime_context().get_accelerator_ids().get("GPU", [])
            gpu_ids = [str(g) for g in ray_gpus]
        self.rank = rank
        self.world_size = world_size
        self._use_devices(tuple(gpu_ids), use_gpu, len(gpu_ids))
        # Ray's log monitor takes this marker as the new prefix for this process's lines.
        # (A Ray without it keeps its default prefixes: the compat probe says so.)
        prefix = getattr(ray_constants, "LOG_PREFIX_ACTOR_NAME", None)
        for stream in (sys.stdout, sys.stderr) if isinstance(prefix, str) else ():
            print(f"{prefix}{self!r}", file=stream, flush=True)

    def reserve(self) -> WorkerInfo:
        """Hold a port for the TF server and say where this worker lives."""
        self._port_sock = reserve_port()
        return WorkerInfo(
            rank=self.rank,
            node_ip=ray.util.get_node_ip_address(),
            node_id=self._node_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            port=self._port_sock.getsockname()[1],
            gpu_ids=self._gpu_ids,
        )

    def setup(self, tf_config: str, communication: str) -> SetupReply:
        """Create MWMS; blocks until every peer has joined. Returns replicas in sync and
        the probes' answers (the driver checks that every rank's are rank 0's)."""
        try:
            replicas = self._tf.submit(self._make_strategy, tf_config, communication).result()
            self._times.stamp("strategy_created")
            return SetupReply(replicas, self._compat, compat.source_digest())
        except Exception as exc:  # noqa: BLE001 - classify, then re-raise
            if is_port_clash(f"{type(exc).__name__}: {exc}"):
                raise PortClashError(f"rank {self.rank}: {exc}") from None
            raise
        finally:
            if self._port_sock is not None:
                self._port_sock.close()
                self._port_sock = None

    def _make_strategy(self, tf_config: str, communication: str) -> int:
        os.environ["TF_CONFIG"] = tf_config
        import tensorflow as tf

        impl = getattr(tf.distribute.experimental.CommunicationImplementation, communication)
        options = tf.distribute.experimental.CommunicationOptions(implementation=impl)
        self._strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        own_strategy.install(self._strategy)  # the loop's own MWMS() is this one
        # Each private API, probed once: a plain path where one exists, said on the driver.
        self._compat = compat.run_probes(patches.PROBES)
        self._notes_unsent = self._compat.notes
        patches.install(self._compat)
        return int(self._strategy.num_replicas_in_sync)

    def start(
        self,
        fn,
        config: dict,
        run_dir: str,
        local_rank: int,
        ckpt: CheckpointPlan,
        shards: dict | None,
    ) -> None:
        """Start the user's loop on the TF thread and return at once.

        ``ckpt`` is this attempt's checkpoint plan (``restore_url`` None for a fresh
        start). ``shards`` maps dataset names to this rank's Ray Data iterators.
        """
        if self._strategy is None:
            raise RuntimeError("start() before setup(): the strategy does not exist yet")
        self._host.open(
            strategy=self._strategy,
            rank=self.rank,
            world_size=self.world_size,
            local_rank=local_rank,
            node_ip=ray.util.get_node_ip_address(),
            config=config,
            run_dir=run_dir,
            plan=ckpt,
            shards=shards,
            snapshots=self._compat.ok(compat.SNAPSHOT),
            host_copy=node_copy(run_dir, Settings.from_env(), sweep=local_rank == 0),
        )
        self._checkpointer = self._host.checkpointer
        self._start_watchers(self._checkpointer)
        liveness.set_current(self._buffer.liveness)
        self._run = self._tf.submit(self._guarded, fn)
        # Once the future is done (not in _guarded: a poll woken there finds it not done
        # yet): a held poll answers with the loop's end.
        self._run.add_done_callback(lambda _: self._buffer.news.set())

    def _guarded(self, fn):
        try:
            result = sendable(self._host.call(fn), self.rank)
            self._host.end()  # the last save stored, the final model written
            return FINISHED, result
        except (CheckpointRestoreError, CheckpointMismatchError, CheckpointStorageError) as exc:
            return FAILED, exc  # the driver tells damage, another model and storage apart
        except BaseException as exc:  # noqa: BLE001 - the driver decides what a failure means
            tb = traceback.format_exc()
            return FAILED, WorkerError(self.rank, type(exc).__name__, str(exc), tb)
        finally:
            self._ended_at = time.time()  # lets the driver tell a slow worker from a late poll

    def request_checkpoint(self, reason: str) -> None:
        """Chief only: have the group save at the next step boundary."""
        if self._checkpointer is not None:
            self._checkpointer.request(reason)

    def emergency_checkpoint(self, write_tf: bool, committed: int | None = None):
        """A peer died: this rank's state at its last completed step (a CheckpointPart),
        or why not (``raytf.checkpoint.emergency``). Runs beside the blocked TF thread."""
        try:
            return emergency_part(self._checkpointer, write_tf, committed)
        except Exception as exc:  # noqa: BLE001 - the driver falls back to the last commit
            return f"{type(exc).__name__}: {exc}"

    def command(self, command: Command) -> None:
        """Queue one command of an interactive session for the user's loop."""
        self._buffer.commands.put(command)

    def poll(self, hold_s: float = 0.0) -> WorkerPoll:
        """What happened since the last poll. ``hold_s``: a large group's driver asks
        most ranks to answer only once they have news, or after that long
        (``raytf.group.worker_group.poll_hold_s``), so a round is not one call a rank."""
        self._contact = time.monotonic()  # a driver is there (see claim)
        if hold_s > 0 and not (self._run is not None and self._run.done()):
            self._buffer.news.wait(hold_s)
        self._buffer.news.clear()  # before the drain: news after it sets it again
        done = self._run is not None and self._run.done()
        items = self._buffer.drain()  # after done(): nothing the loop reported is missed
        state, value = (IDLE, None) if self._run is None else (RUNNING, None)
        if done:
            state, value = self._run.result()
        notice = self._checkpointer.notice if self._checkpointer else None
        ticks, phases = self._buffer.liveness.view()
        return WorkerPoll(
            rank=self.rank,
            state=state,
            reports=[i for i in items if isinstance(i, Report)],
            parts=[i for i in items if isinstance(i, CheckpointPart)],
            step=self._buffer.step,
            notice=notice,
            replies=[i for i in items if isinstance(i, Reply)],
            waiting=self._buffer.waiting,
            beats=self._buffer.beats,
            ticks=ticks,
            phases=phases,
            error=value if state == FAILED else None,
            result=value if state == FINISHED else None,
            ended_at=self._ended_at if done else None,
            shard_epochs=[i for i in items if isinstance(i, ShardEpoch)],
            positions=dict(self._buffer.positions),
            startup=self._startup(),
            output=self._output.drain(),
            total_steps=self._buffer.total_steps,
            compat_notes=self._take_notes(),
            copy_cost=getattr(self._checkpointer, "copy_cost", None),
        )

    def _take_notes(self) -> tuple[str, ...]:
        notes, self._notes_unsent = self._notes_unsent, ()
        return notes

    def _startup(self) -> dict | None:
        """The start-up stamps, in the first poll after the first step (once)."""
        if self._buffer.first_step_at is None or "first_step" in self._times.stamps:
            return None
        self._times.stamps["first_step"] = self._buffer.first_step_at
        return dict(self._times.stamps)
