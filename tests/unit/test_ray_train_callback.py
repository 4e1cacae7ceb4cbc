"""Ray Train's Keras callback under raytf (raytf.integrations.ray_train) in both Keras
flavours: every Ray TF example sets ``TF_USE_LEGACY_KERAS=1``, so its ``fit`` is tf_keras's
and calls tf_keras's callback hooks. The examples themselves run in
tests/integration/test_ray_examples.py."""

import keras
import pytest
import tf_keras

from raytf.integrations import ray_train


def test_under_legacy_keras_the_callback_is_a_tf_keras_callback(monkeypatch):
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    callback = ray_train.ReportCheckpointCallback(checkpoint_on="train_batch_end", metrics="loss")
    assert isinstance(callback, tf_keras.callbacks.Callback)
    assert not isinstance(callback, keras.callbacks.Callback)
    # What tf_keras's CallbackList asks of each callback (the error seen without it).
    assert callback._implements_train_batch_hooks()
    assert callback.checkpoint_on == {"train_batch_end"} and callback.metrics == "loss"
    tf_keras.callbacks.CallbackList([callback], model=tf_keras.Sequential())


@pytest.mark.parametrize("value", [None, "0", "false"])
def test_otherwise_it_is_a_keras_3_callback(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    else:
        monkeypatch.setenv("TF_USE_LEGACY_KERAS", value)
    callback = ray_train.ReportCheckpointCallback()
    assert type(callback) is ray_train.ReportCheckpointCallback
    assert isinstance(callback, keras.callbacks.Callback)
    assert callback.checkpoint_on == {"epoch_end"}
