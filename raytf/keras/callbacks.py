"""Which Keras callbacks run on which worker.

Every worker runs the same loop and sees the same global metrics, so
callbacks that decide (EarlyStopping, ReduceLROnPlateau, LearningRateScheduler,
TerminateOnNaN, LambdaCallback) run on every rank and decide alike; raytf
also agrees on ``model.stop_training`` across ranks at each epoch end. Those
that write files (TensorBoard, ModelCheckpoint, CSVLogger) or print a progress
bar run on the chief only, so N workers do not write N copies into one place.
BackupAndRestore is refused: raytf's own checkpoints are coordinated across
workers and exact to the step, which Keras 3's callback is not.
"""

from __future__ import annotations

from typing import Any

from raytf.errors import ConfigError

CHIEF_ONLY = ("TensorBoard", "ModelCheckpoint", "CSVLogger", "ProgbarLogger")
REFUSED = {
    "BackupAndRestore": (
        "raytf checkpoints and restores the whole group itself: set "
        "RunConfig(checkpoint_config=CheckpointConfig(checkpoint_every_steps=N)) and "
        "FailureConfig(max_failures=...) instead of BackupAndRestore"
    ),
}


def _class_names(callback: Any) -> set[str]:
    return {cls.__name__ for cls in type(callback).__mro__}


def check_callbacks(callbacks: list[Any]) -> None:
    """Driver-side check, before any worker starts."""
    for cb in callbacks:
        for name, why in REFUSED.items():
            if name in _class_names(cb):
                raise ConfigError(f"callbacks: {name} is not supported under raytf; {why}")


def callbacks_for_rank(callbacks: list[Any], rank: int) -> list[Any]:
    """The callbacks this rank runs: all on the chief, the deciding ones elsewhere."""
    check_callbacks(callbacks)
    if rank == 0:
        return list(callbacks)
    return [cb for cb in callbacks if not (_class_names(cb) & set(CHIEF_ONLY))]
