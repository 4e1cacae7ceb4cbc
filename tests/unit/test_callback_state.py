"""Keras's stateful callbacks keep their counters across a resume; BackupAndRestore is
refused (``raytf.worker.fit.callback_state``)."""

import json
import math

import pytest

from raytf.errors import ConfigError
from raytf.worker.fit import callback_state

pytestmark = pytest.mark.unit


def test_the_built_in_callbacks_state_survives_their_reset_at_the_resumed_call():
    import keras

    stop = keras.callbacks.EarlyStopping(patience=3)
    plateau = keras.callbacks.ReduceLROnPlateau(patience=2)
    best = keras.callbacks.ModelCheckpoint("/nonexistent/m.keras", save_best_only=True)
    other = keras.callbacks.LambdaCallback()
    stop.wait, stop.best, stop.best_epoch = 2, 0.25, 4
    plateau.wait, plateau.best, plateau.cooldown_counter = 1, 0.5, 0
    best.best = 0.125
    # Through JSON, as the checkpoint's state file carries it.
    saved = json.loads(json.dumps(callback_state.capture([stop, plateau, best, other])))
    for callback in (stop, plateau):
        callback.on_train_begin()  # what the resumed fit does first
    best.best = math.inf
    assert (stop.wait, plateau.wait) == (0, 0)
    lines = callback_state.restore([stop, plateau, best, other], saved)
    assert lines == []
    assert (stop.wait, stop.best, stop.best_epoch) == (2, 0.25, 4)
    assert (plateau.wait, plateau.best, best.best) == (1, 0.5, 0.125)


def test_what_is_not_carried_is_said():
    import keras

    stop = keras.callbacks.EarlyStopping(restore_best_weights=True)
    stop.best_weights = [0.0]
    saved = callback_state.capture([stop])
    lines = callback_state.restore([stop, keras.callbacks.EarlyStopping()], saved)
    assert [line.split(":")[0] for line in lines] == [
        "EarlyStopping(restore_best_weights=True)",
        "EarlyStopping's state is not in the checkpoint",
    ]


def test_backup_and_restore_is_refused_with_what_to_do():
    import keras

    callback_state.refuse_backup_and_restore([keras.callbacks.EarlyStopping()])
    with pytest.raises(ConfigError, match="Remove it; CheckpointConfig"):
        callback_state.refuse_backup_and_restore([keras.callbacks.BackupAndRestore("/tmp/x")])


def test_nan_stays_nan_and_what_is_not_a_number_is_not_carried_but_said():
    import keras

    stop = keras.callbacks.EarlyStopping()
    stop.best = float("nan")
    odd = keras.callbacks.ModelCheckpoint("/nonexistent/m.keras", save_best_only=True)
    odd.best = [0.5, 0.25]  # a subclass keeping something else there
    saved = json.loads(json.dumps(callback_state.capture([stop, odd])))
    assert saved[1] is None
    stop.best = 0.0
    lines = callback_state.restore([stop, odd], saved)
    assert math.isnan(stop.best)
    assert lines == [
        "ModelCheckpoint's state is not in the checkpoint: it starts afresh (not exact)"
    ]
