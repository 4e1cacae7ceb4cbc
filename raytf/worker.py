"""The Ray actor hosting one MWMS worker process.

Every TensorFlow call of the process runs on one dedicated thread, in order:
MWMS must be the first TF op of a process and TF's eager context is happiest
on one thread. The actor's own methods stay free to answer ``poll`` while the
user's loop runs, which is how metrics stream to the driver without a queue
actor in between. TensorFlow is imported as soon as the actor starts, in the
background, so the 5-7 s import overlaps placement and port set-up.
"""

from __future__ import annotations

import inspect
import os
import socket
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import ray

from raytf.context import Report, TrainContext, _ReportBuffer, _set_context
from raytf.devices import cuda_visible_devices
from raytf.errors import PortClashError, WorkerError
from raytf.ports import is_port_clash, reserve_port

IDLE, RUNNING, FINISHED, FAILED = "idle", "running", "finished", "failed"


@dataclass(frozen=True)
class WorkerInfo:
    """Where a worker lives; what ``raytf status`` shows and tests signal."""

    rank: int
    node_ip: str
    node_id: str
    hostname: str
    pid: int
    port: int
    gpu_ids: tuple[str, ...]


@dataclass(frozen=True)
class WorkerPoll:
    """One answer to the driver's poll: new reports and where the user's loop stands."""

    rank: int
    state: str
    reports: list[Report]
    error: WorkerError | None = None
    result: Any = None


def _import_tensorflow() -> None:
    import tensorflow  # noqa: F401  (import only: no op may run before MWMS exists)


def _call_user_fn(fn, config):
    if len(inspect.signature(fn).parameters) == 0:
        return fn()
    return fn(config)


class RaytfWorker:
    """One rank of the group. Created by WorkerGroup, never by users."""

    def __init__(self, rank: int, world_size: int, use_gpu: bool, gpus: int, env: dict):
        self.rank = rank
        self.world_size = world_size
        for key, value in env.items():
            os.environ.setdefault(key, value)
        ctx = ray.get_runtime_context()
        self._gpu_ids = tuple(str(g) for g in ctx.get_accelerator_ids().get("GPU", []))
        # Before TF is imported: TF reads this once, at CUDA initialisation.
        os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices(self._gpu_ids, use_gpu, gpus)
        self._node_id = ctx.get_node_id()
        self._tf = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"raytf-tf-{rank}")
        self._tf.submit(_import_tensorflow)
        self._buffer = _ReportBuffer()
        self._port_sock: socket.socket | None = None
        self._strategy = None
        self._run: Future | None = None

    def __repr__(self) -> str:
        # Ray prefixes each line this actor prints with its repr: "(raytf rank=1 pid=...)".
        return f"raytf rank={self.rank}"

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

    def setup(self, tf_config: str, communication: str) -> int:
        """Create MWMS; blocks until every peer has joined. Returns replicas in sync."""
        try:
            return self._tf.submit(self._make_strategy, tf_config, communication).result()
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
        return int(self._strategy.num_replicas_in_sync)

    def start(self, fn, config: dict, run_dir: str, local_rank: int) -> None:
        """Start the user's loop on the TF thread and return at once."""
        if self._strategy is None:
            raise RuntimeError("start() before setup(): the strategy does not exist yet")
        context = TrainContext(
            strategy=self._strategy,
            rank=self.rank,
            world_size=self.world_size,
            local_rank=local_rank,
            node_ip=ray.util.get_node_ip_address(),
            config=dict(config),
            run_dir=run_dir,
            buffer=self._buffer,
        )
        _set_context(context)
        self._run = self._tf.submit(self._guarded, fn, context.config)

    def _guarded(self, fn, config):
        try:
            return FINISHED, _call_user_fn(fn, config)
        except BaseException as exc:  # noqa: BLE001 - the driver decides what a failure means
            tb = traceback.format_exc()
            return FAILED, WorkerError(self.rank, type(exc).__name__, str(exc), tb)

    def poll(self) -> WorkerPoll:
        reports = self._buffer.drain()
        if self._run is None:
            return WorkerPoll(self.rank, IDLE, reports)
        if not self._run.done():
            return WorkerPoll(self.rank, RUNNING, reports)
        state, value = self._run.result()
        # Reports made just before the loop returned are in the buffer too.
        reports += self._buffer.drain()
        if state == FAILED:
            return WorkerPoll(self.rank, FAILED, reports, error=value)
        return WorkerPoll(self.rank, FINISHED, reports, result=value)
