"""A run's configuration, the one import for it: ``from raytf.config import ...``.

``run`` holds what a run is given (``ScalingConfig``, ``RunConfig``, ``LoggingConfig``),
``fault_tolerance`` what protects it (``CheckpointConfig``, ``FailureConfig`` and the
defaults for a run nobody configured), ``checks`` the checks every value goes through.
"""

from raytf.config.fault_tolerance import CheckpointConfig, FailureConfig
from raytf.config.run import LoggingConfig, RunConfig, ScalingConfig

__all__ = [
    "CheckpointConfig",
    "FailureConfig",
    "LoggingConfig",
    "RunConfig",
    "ScalingConfig",
]
