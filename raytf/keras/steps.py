"""Step functions for a compiled Keras 3 model under MWMS, in three modes.

Keras 3's ``model.fit`` fails under multi-worker MWMS (keras-team/keras#20585)
in its data handling, not in its step: ``model.train_step`` run through
``strategy.run`` works, and Keras's metric variables (``aggregation="sum"``)
are all-reduced on update, so every worker reads global metrics. So the step
is Keras's own (a model that overrides ``train_step`` keeps its override) and
only the loop around it is raytf's.

- ``eager``: ``strategy.run`` called from Python for every step. ``print``,
  ``breakpoint()`` and Python control flow inside the model work. For debugging.
- ``compiled`` (default): the same step inside one ``tf.function``.
- ``xla``: the forward and backward pass compiled by XLA (``jit_compile``),
  the gradient all-reduce and the optimizer update around it in the graph.
  XLA cannot compile collectives on CPU ("Collectives are not yet implemented
  for CPU devices when compiling with XLA"), and Keras's optimizer and metrics
  run collectives, so they stay outside the XLA cluster.

``steps_per_call`` steps run per call (a ``tf.range`` loop in the graph), which
cuts Python and dispatch overhead per step; checkpoints and reports then
happen at call boundaries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raytf.errors import ConfigError

STEP_MODES = ("eager", "compiled", "xla")


def check_step_mode(step_mode: str, steps_per_call: int) -> None:
    if step_mode not in STEP_MODES:
        raise ConfigError(f"step_mode = {step_mode!r}: must be one of {', '.join(STEP_MODES)}")
    if not isinstance(steps_per_call, int) or steps_per_call < 1:
        raise ConfigError(f"steps_per_call = {steps_per_call!r}: must be a positive int")


def _xla_train_step(model) -> Callable[[Any], dict]:
    """Keras's train step with the forward and backward pass in one XLA cluster."""
    import keras
    import tensorflow as tf

    if type(model).train_step is not keras.Model.train_step:
        raise ConfigError(
            f"step_mode='xla' compiles raytf's own split of the Keras step, and "
            f"{type(model).__name__} overrides train_step; use step_mode='compiled'"
        )
    loss_tracker = next(m for m in model.metrics if m.name == "loss")

    @tf.function(jit_compile=True)
    def forward_backward(x, y, sample_weight):
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x, y, y_pred, sample_weight, training=True)
            scaled = model.optimizer.scale_loss(loss)
        return loss, y_pred, tape.gradient(scaled, model.trainable_weights)

    def step(data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        loss, y_pred, grads = forward_backward(x, y, sample_weight)
        model.optimizer.apply_gradients(zip(grads, model.trainable_weights))
        # compute_loss divided by the replicas in sync; the tracker wants the batch mean.
        replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        batch = tf.shape(tf.nest.flatten(x)[0])[0]
        loss_tracker.update_state(loss * replicas, sample_weight=batch)
        return model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    return step


def make_train_function(model, strategy, step_mode: str) -> Callable[[Any, int], dict]:
    """``fn(iterator, k)`` runs ``k`` training steps and returns the metrics after them."""
    replica_step = _xla_train_step(model) if step_mode == "xla" else model.train_step
    return _make_multi_step(model, strategy, replica_step, step_mode)


def make_test_function(model, strategy, step_mode: str) -> Callable[[Any, int], dict]:
    """``fn(iterator, k)`` evaluates ``k`` batches (Keras's ``test_step``)."""
    return _make_multi_step(model, strategy, model.test_step, step_mode)


def _make_multi_step(model, strategy, replica_step, step_mode: str):
    """The metrics are read after the steps, in cross-replica context.

    Inside the replica function a metric's result is read from the local copy
    of its variables and differs between workers (seen here: 0.3125 on rank 0,
    0.3359 on rank 1, for variables that held 83/256 on both); read after the
    update, the all-reduced variables give the global value on every rank.
    """
    import tensorflow as tf

    if step_mode == "eager":

        def eager(iterator, k: int) -> dict:
            for _ in range(int(k)):
                strategy.run(replica_step, args=(next(iterator),))
            return model.get_metrics_result()

        return eager

    @tf.function
    def compiled(iterator, k):
        for _ in tf.range(k):
            strategy.run(replica_step, args=(next(iterator),))
        return model.get_metrics_result()

    def call(iterator, k: int) -> dict:
        # k as a tensor: one trace serves every call length (epoch ends cut calls short).
        return compiled(iterator, tf.constant(int(k), tf.int64))

    return call
