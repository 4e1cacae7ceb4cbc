"""Ray Train's TensorFlow API on raytf: move a ``TensorflowTrainer`` script by its imports.

    from raytf.integrations import ray_train as train
    from raytf.integrations.ray_train import (
        Checkpoint, ReportCheckpointCallback, RunConfig, ScalingConfig, TensorflowTrainer)

What such scripts call, and what it does here:

- ``TensorflowTrainer(train_loop_per_worker, train_loop_config=, scaling_config=,
  run_config=, datasets=)`` is ``raytf.Trainer``; ``fit()`` returns its
  ``Result`` with ``checkpoint`` the latest reported ``Checkpoint``.
- ``train.report(metrics, checkpoint=None)``: metrics as ``raytf.report``; a
  checkpoint (a directory) from rank 0 is stored under the run directory's
  ``train_checkpoints/`` and named the latest only once every file is stored.
  Other ranks' checkpoint directories are not kept (MWMS replicas are alike).
- ``train.get_checkpoint()``: the latest reported checkpoint, or None. After a
  failure raytf restarts the whole group and the loop runs again: it finds
  its last checkpoint here, as under Ray Train.
- ``train.get_context()``: ``get_world_rank()``, ``get_world_size()``,
  ``get_local_rank()``.
- ``os.environ["TF_CONFIG"]`` is set before the loop runs, and the loop's own
  ``tf.distribute.MultiWorkerMirroredStrategy()`` is the strategy raytf made in
  the worker (``raytf.worker.own_strategy`` says why a second one would hang).

raytf's own coordinated checkpoints (every rank's state at one step, exact resume,
emergency saves) need ``raytf.get_context().restore(...)``; a moved script may switch
to them later, line by line (until then no line says its loop names no state).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import tempfile
from dataclasses import replace
from typing import Any

import keras

from raytf.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from raytf.driver.launch import runner_for
from raytf.errors import ConfigError
from raytf.integrations.ray_checkpoint import Checkpoint, TensorflowCheckpoint
from raytf.integrations.ray_data_iterator import RayDataIterator
from raytf.keras.report_callback import ReportCheckpointLogic
from raytf.result import Result
from raytf.rundir.storage import Storage
from raytf.trainer import Trainer
from raytf.worker.context import get_context as _raytf_context
from raytf.worker.context import get_dataset_shard as _raytf_shard

__all__ = [
    "Checkpoint",
    "CheckpointConfig",
    "FailureConfig",
    "ReportCheckpointCallback",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "TensorflowCheckpoint",
    "TensorflowTrainer",
    "Tuner",  # noqa: F822 - made on first use (module __getattr__): Ray Tune is heavy
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "prepare_dataset_shard",
    "report",
]

CHECKPOINTS = "train_checkpoints"
LATEST = "latest.txt"


class _Context:
    """Ray Train's ``TrainContext`` methods that TF scripts call."""

    def __init__(self, ctx: Any):
        self._ctx = ctx

    def get_world_rank(self) -> int:
        return self._ctx.rank

    def get_world_size(self) -> int:
        return self._ctx.world_size

    def get_local_rank(self) -> int:
        return self._ctx.local_rank


def get_context() -> _Context:
    """Ray Train's context: ``get_world_rank()``, ``get_world_size()``, ``get_local_rank()``."""
    return _Context(_raytf_context())


def _storage() -> Storage:
    return Storage(_raytf_context().run_dir)


def report(metrics: dict[str, Any], *, checkpoint: Checkpoint | None = None) -> None:
    """Report metrics; rank 0's ``checkpoint`` is stored, then named the latest.

    Args:
        metrics: As ``raytf.report``'s: names to numbers, strings or scalar tensors.
        checkpoint: Rank 0's is kept in ``RUN_DIR/train_checkpoints/``. Default None."""
    (ctx := _raytf_context()).state_said = True  # its state: in its own checkpoints
    ctx.report(metrics)
    if checkpoint is None or ctx.rank != 0:
        return
    storage = _storage()
    name = next_name(storage.listdir(CHECKPOINTS))
    storage.upload_tree(checkpoint.path, CHECKPOINTS, name)
    # The checkpoint this attempt started from stays named: the other ranks' get_checkpoint.
    before = _read_latest(storage)
    if before is None:
        start = None
    elif before["attempt"] == ctx.attempt:
        start = before["start"]
    else:
        start = before["name"]
    _write_latest(storage, name, ctx.attempt, start)  # whole, or the previous one


def next_name(names: list[str]) -> str:
    """The name after the highest-numbered reported checkpoint: never one that exists,
    whatever was deleted or failed between them (a count of them would collide)."""
    numbers = [int(n[len("checkpoint_") :]) for n in names if re.fullmatch(r"checkpoint_\d+", n)]
    return f"checkpoint_{max(numbers, default=-1) + 1:06d}"


def _read_latest(storage: Storage) -> dict | None:
    """``LATEST``: the newest reported checkpoint's name, the attempt that reported it, and
    the one that attempt started from (a plain name: a seed, or an older run's file)."""
    if not storage.exists(CHECKPOINTS, LATEST):
        return None
    with storage.fs.open(storage.path(CHECKPOINTS, LATEST), "r") as f:
        text = f.read().strip()
    try:
        doc = json.loads(text)
    except ValueError:
        return {"name": text, "attempt": 0, "start": text}
    return doc if isinstance(doc, dict) else {"name": text, "attempt": 0, "start": text}


def _write_latest(storage: Storage, name: str, attempt: int, start: str | None) -> None:
    doc = {"name": name, "attempt": attempt, "start": start}
    storage.write_atomic(json.dumps(doc).encode(), CHECKPOINTS, LATEST)


def latest_checkpoint(run_dir: str) -> Checkpoint | None:
    """The newest checkpoint reported in the run (by any attempt), or None."""
    storage = Storage(run_dir)
    doc = _read_latest(storage)
    return None if doc is None else Checkpoint(storage.url(CHECKPOINTS, doc["name"]))


def get_dataset_shard(name: str) -> RayDataIterator:
    """This worker's shard of the trainer's dataset ``name``, with Ray's ``DataIterator``
    methods (``to_tf(..., batch_size=<rows per worker>)``, ``iter_batches``, ...).

    Args:
        name: A key of the trainer's ``datasets`` (a ``KeyError`` names those it has)."""
    return RayDataIterator(_raytf_shard(name))


def prepare_dataset_shard(tf_dataset_shard: Any) -> Any:
    """Ray Train's helper for a ``tf.data.Dataset`` made from a worker's own shard: that
    data is this worker's already, so MWMS must not shard it again (auto-sharding off);
    prefetched, as Ray's is.

    Args:
        tf_dataset_shard: The ``tf.data.Dataset`` read from this worker's shard."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return tf_dataset_shard.with_options(options).prefetch(tf.data.AUTOTUNE)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint this attempt starts from: the newest an earlier attempt (or run)
    reported, the same on every rank however late a rank asks; once rank 0 reports in
    this attempt, rank 0 gets its own newest (Ray's "latest reported"), the other ranks
    still the attempt's start, so no rank loads a state the others did not.

    Returns:
        The ``Checkpoint``; None when none was reported nor given to the trainer."""
    ctx = _raytf_context()
    storage = Storage(ctx.run_dir)
    doc = _read_latest(storage)
    if doc is None:
        return None
    name = doc["name"]
    if doc["attempt"] == ctx.attempt and ctx.rank != 0:
        name = doc["start"]
    return None if name is None else Checkpoint(storage.url(CHECKPOINTS, name))


def _as_set(value: str | list[str]) -> set[str]:
    return {value} if isinstance(value, str) else set(value)


def legacy_keras() -> bool:
    """Is ``tf.keras`` tf_keras here? TensorFlow's own test of the variable (every Ray
    Train TF example sets it: their ``fit`` is tf_keras's, and so must their callback be)."""
    return os.environ.get("TF_USE_LEGACY_KERAS") in ("true", "True", "1")


class _ReportCheckpoint(ReportCheckpointLogic):
    """Ray Train's Keras callback: report logs, and ``model.keras`` as a checkpoint, at
    epoch ends (``checkpoint_on`` / ``report_metrics_on``: "epoch_end" or "train_batch_end").
    Mixed into each Keras flavour's ``Callback``."""

    def __init__(
        self,
        checkpoint_on: str | list[str] = "epoch_end",
        report_metrics_on: str | list[str] = "epoch_end",
        metrics: str | list[str] | dict[str, str] | None = None,
    ):
        super().__init__()
        self._setup(report_every=1, global_batch_size=None)
        self.checkpoint_on = _as_set(checkpoint_on)
        self.report_on = _as_set(report_metrics_on)
        self.metrics = metrics

    def _pick(self, logs: dict) -> dict:
        if self.metrics is None:
            return dict(logs)
        if isinstance(self.metrics, str):
            return {self.metrics: logs[self.metrics]}
        if isinstance(self.metrics, dict):
            return {name: logs[key] for name, key in self.metrics.items()}
        return {key: logs[key] for key in self.metrics}

    def _handle(self, when: str, logs: dict | None) -> None:
        if when not in self.report_on and when not in self.checkpoint_on:
            return
        metrics = self._pick(logs or {})  # with a checkpoint too, as Ray's callback does
        if when not in self.checkpoint_on:
            report(metrics)
            return
        scratch = tempfile.mkdtemp(prefix="raytf-keras-ckpt-")
        try:
            self.model.save(os.path.join(scratch, "model.keras"))  # every rank: MWMS reads
            report(metrics, checkpoint=Checkpoint.from_directory(scratch))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.step += 1
        _raytf_context().step_end(self.step)
        self._handle("train_batch_end", logs)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._handle("epoch_end", logs)


class ReportCheckpointCallback(_ReportCheckpoint, keras.callbacks.Callback):
    """Ray Train's callback; under ``TF_USE_LEGACY_KERAS=1`` an instance of the same
    callback built on tf_keras's ``Callback`` (tf_keras's ``fit`` calls its own hooks).

    Args:
        checkpoint_on: When to report ``model.keras``: ``"epoch_end"``, ``"train_batch_end"``.
        report_metrics_on: The same, for reporting metrics. Default ``"epoch_end"``.
        metrics: Which logs to report: a key, a list, or ``{name: key}``. Default all."""

    def __new__(cls, *args: Any, **kwargs: Any):
        if cls is ReportCheckpointCallback and legacy_keras():
            return _legacy_callback_class()(*args, **kwargs)
        return super().__new__(cls)


@functools.cache
def _legacy_callback_class() -> type:
    import tf_keras

    class LegacyReportCheckpointCallback(_ReportCheckpoint, tf_keras.callbacks.Callback):
        """``ReportCheckpointCallback`` for tf_keras's ``fit``."""

    return LegacyReportCheckpointCallback


def _tune_trainable(trainable: Any, param_space: dict | None) -> Any:
    """A raytf trainer as Ray Tune's trainable; anything else as it is."""
    from raytf.keras.trainer import KerasTrainer

    if not isinstance(trainable, (Trainer, KerasTrainer)):
        return trainable
    other = sorted(set(param_space or {}) - {"train_loop_config"})
    if other:
        raise ConfigError(
            f"Tuner(trainer, param_space=...): {other} cannot be searched over with a raytf "
            'trainer; put what the loop reads under "train_loop_config" and set the rest '
            "on the trainer"
        )
    return trainable.as_trainable()


@functools.cache
def _tuner_class() -> type:
    from ray import tune  # Ray Tune's import is heavy and needs its extras: only on use

    class Tuner(tune.Tuner):
        """Ray Tune's ``Tuner``, taking a raytf trainer as Ray's takes a Ray Train trainer:
        ``Tuner(trainer, param_space={"train_loop_config": {...}})``, each trial's
        ``train_loop_config`` merged over the trainer's."""

        def __init__(self, trainable: Any = None, *, param_space: dict | None = None, **kw):
            super().__init__(_tune_trainable(trainable, param_space), param_space=param_space, **kw)

        @classmethod
        def restore(cls, path: str, trainable: Any, **kwargs: Any):
            return tune.Tuner.restore(path, _tune_trainable(trainable, None), **kwargs)

    return Tuner


def __getattr__(name: str) -> Any:
    if name == "Tuner":
        return _tuner_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_SET_UP_BY_RAYTF = {
    "tensorflow_config": "raytf sets TF_CONFIG and MultiWorkerMirroredStrategy up itself",
    "backend_config": "raytf sets TF_CONFIG and MultiWorkerMirroredStrategy up itself",
    "dataset_config": "raytf splits each dataset into one shard per worker itself",
    "metadata": "keep what the loop needs in train_loop_config or the checkpoint's files",
}


class TensorflowTrainer(Trainer):
    """Ray Train's ``TensorflowTrainer`` signature on ``raytf.Trainer``.

    ``resume_from_checkpoint``: a ``Checkpoint`` the loop's ``get_checkpoint()``
    returns until the run reports one of its own: it is copied into the run as
    its first reported checkpoint when the run starts without one (a rerun of
    the same name that has reported checkpoints resumes from its own newest).
    Ray's other arguments configure what raytf does itself: given, they are
    refused with what to do instead.

    Args:
        train_loop_per_worker: As ``raytf.Trainer``'s.
        resume_from_checkpoint: Where a run without its own starts. Default None.
        **kwargs: ``train_loop_config``, ``scaling_config``, ``run_config``, ``datasets``.

    Raises:
        ConfigError: A Ray argument raytf sets up itself, a bad ``resume_from_checkpoint``."""

    def __init__(
        self,
        train_loop_per_worker: Any,
        *,
        resume_from_checkpoint: Checkpoint | None = None,
        **kwargs: Any,
    ):
        for name, why in _SET_UP_BY_RAYTF.items():
            if kwargs.pop(name, None) is not None:
                raise ConfigError(f"TensorflowTrainer({name}=...) is not supported: {why}")
        if resume_from_checkpoint is not None and not isinstance(
            resume_from_checkpoint, Checkpoint
        ):
            raise ConfigError(
                f"resume_from_checkpoint = {resume_from_checkpoint!r}: must be a Checkpoint "
                "(Checkpoint.from_directory(path))"
            )
        super().__init__(train_loop_per_worker, **kwargs)
        self.resume_from_checkpoint = resume_from_checkpoint

    def fit(self) -> Result:
        """``raytf.Trainer.fit``; ``Result.checkpoint`` is the latest reported ``Checkpoint``."""
        seed = self.resume_from_checkpoint
        if seed is None:
            result = super().fit()
        else:
            # Seeded once the run directory is held (on a cluster and in local mode): with
            # start_fresh the earlier run's files are set aside then, the seed must stay.
            runner = runner_for(self.run_spec())
            try:
                _seed(self.run_config.run_dir, seed)
            except BaseException:
                runner.writer.close(5.0)
                raise
            result = runner.run()
        return replace(result, checkpoint=latest_checkpoint(result.path))  # type: ignore[arg-type]


def _seed(run_dir: str, checkpoint: Checkpoint) -> None:
    """The run's first reported checkpoint, unless it has one."""
    if latest_checkpoint(run_dir) is not None:
        return
    storage = Storage(run_dir)
    name = "checkpoint_000000"
    with checkpoint.as_directory() as local:
        storage.upload_tree(local, CHECKPOINTS, name)
    _write_latest(storage, name, 0, name)
