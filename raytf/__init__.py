"""raytf: a Ray-orchestrated cluster trainer for TensorFlow's MultiWorkerMirroredStrategy."""

from raytf.config import RunConfig, ScalingConfig
from raytf.context import TrainContext, get_context, report
from raytf.errors import (
    ConfigError,
    PlacementTimeoutError,
    RaytfError,
    TrainingFailedError,
    UnsatisfiableResourcesError,
    WorkerDiedError,
    WorkerError,
)
from raytf.result import Result
from raytf.trainer import Trainer

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "PlacementTimeoutError",
    "RaytfError",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "TrainContext",
    "Trainer",
    "TrainingFailedError",
    "UnsatisfiableResourcesError",
    "WorkerDiedError",
    "WorkerError",
    "get_context",
    "report",
]
