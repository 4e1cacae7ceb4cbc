"""raytf: a Ray-orchestrated cluster trainer for TensorFlow's MultiWorkerMirroredStrategy."""

from raytf.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from raytf.context import TrainContext, get_context, report, step_end
from raytf.errors import (
    ConfigError,
    PlacementTimeoutError,
    RaytfError,
    TrainingFailedError,
    UnsatisfiableResourcesError,
    WorkerDiedError,
    WorkerError,
    WorkerHangError,
)
from raytf.keras_trainer import KerasTrainer
from raytf.result import Result
from raytf.session import Session, SessionClosedError
from raytf.trainer import Trainer

__version__ = "0.1.0"

__all__ = [
    "CheckpointConfig",
    "ConfigError",
    "FailureConfig",
    "KerasTrainer",
    "PlacementTimeoutError",
    "RaytfError",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "Session",
    "SessionClosedError",
    "TrainContext",
    "Trainer",
    "TrainingFailedError",
    "UnsatisfiableResourcesError",
    "WorkerDiedError",
    "WorkerHangError",
    "WorkerError",
    "get_context",
    "report",
    "step_end",
]
