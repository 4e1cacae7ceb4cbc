"""TensorFlow's ``fit`` idiom as a cost workload: Keras's own ``model.fit``, no raytf call.

``raytf bench checkpoints --parts cost --cost-workloads fit``: the loop is what
TensorFlow's multi-worker guide writes (a model compiled in the strategy's scope,
``model.fit`` on a ``tf.data`` input), with only the strategy taken from raytf.
What protects it is raytf's, as a user gets it from the defaults (``Trainer``
given no failure or checkpoint config): the emergency copies and the standbys
around Keras's own loop. A callback times each step from one batch's end to the
next (everything between two batches, every other callback's work included); the
first ``WARMUP`` steps (tracing) are left out by the bench, as for the other
workloads.

The model is the cost part's ``mlp`` one (a 256-wide MLP, 4 layers): a step of
milliseconds, where a fixed cost per step shows most.
"""

from __future__ import annotations

import time

import numpy as np

import raytf

BATCH = 64
FEATURES = 256
CLASSES = 10


def fit_loop(config: dict) -> dict:
    """``config``: ``steps`` (one epoch of them), ``width``; returns what the bench's
    custom loop returns (its per-step ``times``)."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(7)
    strategy = raytf.get_context().strategy  # was: tf.distribute.MultiWorkerMirroredStrategy()
    width = config["width"]
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((FEATURES,)),
                *[keras.layers.Dense(width, activation="relu") for _ in range(4)],
                keras.layers.Dense(CLASSES),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH * 64, FEATURES), dtype=np.float32)
    y = rng.integers(0, CLASSES, BATCH * 64)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH, drop_remainder=True)
    times: list[float] = []

    class StepTimes(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.last = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            now = time.perf_counter()
            times.append(now - self.last)
            self.last = now

    model.fit(ds, epochs=1, steps_per_epoch=config["steps"], callbacks=[StepTimes()], verbose=0)
    params = int(sum(np.prod(v.shape) for v in model.trainable_variables))
    return {
        "times": times,
        "start": 0,
        "restore_s": 0.0,
        "params": params,
        "steps": config["steps"],
        "cpu_s": None,
        "cpu_steps": 0,
        "cpu_saves": 0,
    }
