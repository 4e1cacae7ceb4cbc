"""raytf: a Ray-orchestrated cluster trainer for TensorFlow's MultiWorkerMirroredStrategy.

The public names load on first use (PEP 562): a process that only needs a
leaf module (``raytf.data.synthetic``, the benchmark's hand-launched MWMS workers)
does not pay for importing Ray.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from raytf.compat import DISTRIBUTION as DISTRIBUTION  # pip's name: another raytf is on PyPI

__version__ = "0.1.0"

_EXPORTS = {
    "Callback": "raytf.driver.callbacks",
    "CheckpointConfig": "raytf.config",
    "FailureConfig": "raytf.config",
    "LoggingConfig": "raytf.config",
    "RunConfig": "raytf.config",
    "ScalingConfig": "raytf.config",
    "TrainContext": "raytf.worker.context",
    "get_context": "raytf.worker.context",
    "report": "raytf.worker.context",
    "get_dataset_shard": "raytf.worker.context",
    "DataShard": "raytf.data.shard",
    "DataShardError": "raytf.errors",
    "DependencyError": "raytf.errors",
    "CheckpointMismatchError": "raytf.errors",
    "RunDirInUseError": "raytf.errors",
    "LeaseLostError": "raytf.errors",
    "StorageUnavailableError": "raytf.errors",
    "step_end": "raytf.worker.context",
    "slow_phase": "raytf.worker.context",
    "ConfigError": "raytf.errors",
    "PlacementTimeoutError": "raytf.errors",
    "RaytfError": "raytf.errors",
    "TrainingFailedError": "raytf.errors",
    "UnsatisfiableResourcesError": "raytf.errors",
    "WorkerDiedError": "raytf.errors",
    "WorkerError": "raytf.errors",
    "WorkerHangError": "raytf.errors",
    # What a TrainingFailedError's causes can hold, importable where it is caught.
    "CheckpointRestoreError": "raytf.errors",
    "CheckpointStorageError": "raytf.errors",
    "PortClashError": "raytf.errors",
    "UserCodeLoadError": "raytf.errors",
    "WorkerSetupError": "raytf.errors",
    "KerasTrainer": "raytf.keras.trainer",
    "Result": "raytf.result",
    "Session": "raytf.keras.session",
    "SessionClosedError": "raytf.keras.session",
    "Trainer": "raytf.trainer",
    "ensure_ray": "raytf.group.cluster",
    "weights_digest": "raytf.digests",
}

__all__ = [
    "Callback",
    "CheckpointConfig",
    "CheckpointMismatchError",
    "CheckpointRestoreError",
    "CheckpointStorageError",
    "ConfigError",
    "DataShard",
    "DataShardError",
    "DependencyError",
    "FailureConfig",
    "KerasTrainer",
    "LeaseLostError",
    "LoggingConfig",
    "PlacementTimeoutError",
    "PortClashError",
    "RaytfError",
    "Result",
    "RunConfig",
    "RunDirInUseError",
    "ScalingConfig",
    "Session",
    "SessionClosedError",
    "StorageUnavailableError",
    "TrainContext",
    "Trainer",
    "TrainingFailedError",
    "UnsatisfiableResourcesError",
    "UserCodeLoadError",
    "WorkerDiedError",
    "WorkerError",
    "WorkerHangError",
    "WorkerSetupError",
    "get_context",
    "get_dataset_shard",
    "report",
    "step_end",
    "slow_phase",
    "ensure_ray",
    "weights_digest",
]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'raytf' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:
    from raytf.config import (
        CheckpointConfig,
        FailureConfig,
        LoggingConfig,
        RunConfig,
        ScalingConfig,
    )
    from raytf.data.shard import DataShard
    from raytf.digests import weights_digest
    from raytf.driver.callbacks import Callback
    from raytf.errors import (
        CheckpointMismatchError,
        CheckpointRestoreError,
        CheckpointStorageError,
        ConfigError,
        DataShardError,
        DependencyError,
        LeaseLostError,
        PlacementTimeoutError,
        PortClashError,
        RaytfError,
        RunDirInUseError,
        StorageUnavailableError,
        TrainingFailedError,
        UnsatisfiableResourcesError,
        UserCodeLoadError,
        WorkerDiedError,
        WorkerError,
        WorkerHangError,
        WorkerSetupError,
    )
    from raytf.group.cluster import ensure_ray
    from raytf.keras.session import Session, SessionClosedError
    from raytf.keras.trainer import KerasTrainer
    from raytf.result import Result
    from raytf.trainer import Trainer
    from raytf.worker.context import (
        TrainContext,
        get_context,
        get_dataset_shard,
        report,
        slow_phase,
        step_end,
    )
