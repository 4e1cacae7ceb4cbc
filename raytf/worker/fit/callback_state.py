"""The state of Keras's built-in stateful callbacks, carried in raytf's checkpoints.

A resumed ``fit`` calls ``on_train_begin`` once more, and Keras's callbacks
reset there: ``EarlyStopping`` would forget how long it has waited and its best
value, ``ReduceLROnPlateau`` its patience and cooldown, ``ModelCheckpoint``
(``save_best_only``) the best it has saved. Their counters and best values are
a few numbers, so they ride in the ``fit`` call's place and are put back after
that ``on_train_begin``. What is not a number (``EarlyStopping``'s best
weights, with ``restore_best_weights=True``) is not carried: a resume inside the
call says so, and the save at the call's last step waits for ``fit`` to return,
after those weights are put back (``raytf.worker.fit.keeper``). A callback of the
user's own keeps its Python state only if it keeps it in something the
checkpoint holds.

``BackupAndRestore`` is refused: it would load its own epoch-start backup over
the step raytf resumed at and train that epoch again.
"""

from __future__ import annotations

from typing import Any

from raytf.errors import ConfigError

# Class name -> the attributes that are its state across epochs.
STATEFUL = {
    "EarlyStopping": ("wait", "best", "stopped_epoch", "best_epoch"),
    "ReduceLROnPlateau": ("wait", "best", "cooldown_counter"),
    "ModelCheckpoint": ("best",),
}


def refuse_backup_and_restore(callbacks: list) -> None:
    """Raise ``ConfigError`` for a ``BackupAndRestore`` (Keras 3's or tf_keras's)."""
    for callback in callbacks:
        if any(k.__name__ == "BackupAndRestore" for k in type(callback).__mro__):
            raise ConfigError(
                "keras.callbacks.BackupAndRestore inside a raytf run: raytf checkpoints this "
                "fit itself and resumes it at the step a fault interrupted, where "
                "BackupAndRestore would load its epoch-start backup and train that epoch "
                "again. Remove it; CheckpointConfig(checkpoint_every_steps=...) sets how "
                "often raytf saves"
            )


def _kind(callback: Any) -> str | None:
    for klass in type(callback).__mro__:
        if klass.__name__ in STATEFUL and klass.__module__.startswith("keras."):
            return klass.__name__
    return None


def _number(value: Any) -> float | int | None:
    """A plain number (NaN and the infinities as they are: JSON carries them), or raise
    ``TypeError``/``ValueError`` for what is not one."""
    if value is None:
        return None
    if isinstance(value, (int, bool)):
        return int(value)
    return float(value)  # numpy scalars, 0-d tensors


def capture(callbacks: list) -> list:
    """Per user callback, in order: ``[class name, {attr: number}]`` or None."""
    out = []
    for callback in callbacks:
        kind = _kind(callback)
        if kind is None:
            out.append(None)
            continue
        try:
            state = {a: _number(getattr(callback, a, None)) for a in STATEFUL[kind]}
        except (TypeError, ValueError):  # a subclass keeping something else there
            out.append(None)  # not carried: the resume says so
            continue
        if kind == "EarlyStopping" and getattr(callback, "best_weights", None) is not None:
            state["had_best_weights"] = 1
        out.append([kind, state])
    return out


def restore(callbacks: list, saved: list | None) -> list[str]:
    """Put ``saved`` back into the callbacks (after their ``on_train_begin``); the lines
    that say what could not be put back."""
    lines = []
    for index, callback in enumerate(callbacks):
        entry = saved[index] if saved and index < len(saved) else None
        kind = _kind(callback)
        if kind is None:
            continue
        if entry is None or entry[0] != kind:
            lines.append(f"{kind}'s state is not in the checkpoint: it starts afresh (not exact)")
            continue
        state = dict(entry[1])
        if state.pop("had_best_weights", 0):
            lines.append(
                "EarlyStopping(restore_best_weights=True): its best weights are not in the "
                "checkpoint; at the end it restores the best since the restart (not exact)"
            )
        for attr, value in state.items():
            setattr(callback, attr, value)
    return lines
