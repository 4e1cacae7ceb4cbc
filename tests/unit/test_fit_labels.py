"""The step labels raytf gives a Keras ``fit`` with no raytf callback: the run's global
step, counted batch by batch, never ``optimizer.iterations``.

Each case is one where ``iterations`` is not the batch count -- a recompile (a new
optimizer at 0), gradient accumulation (one apply per k batches), a loss-scale
optimizer (overflowing steps not counted) -- and each first shows that it is not, so
the test fails if the assumption behind the labels came back. In-process: TF's default
strategy and a real ``TrainContext``; the multi-worker runs are in
tests/integration/test_keras_fit.py.
"""

import keras
import numpy as np
import tensorflow as tf

from raytf.worker.context import TrainContext, _ReportBuffer
from raytf.worker.fit import resume as fit_resume
from tests.unit.one_rank import one_rank


class Labels(TrainContext):
    """A worker's context that keeps every label handed to ``step_end``."""

    def __init__(self):
        super().__init__(**one_rank(run_dir="", buffer=_ReportBuffer()))
        self.labels: list[int] = []

    def step_end(self, step: int, *, resumable: bool = True) -> None:
        if not self.labels or self.labels[-1] != step:  # an epoch's end repeats its step
            self.labels.append(step)
        super().step_end(step, resumable=resumable)


def fit(ctx, model, epochs=2, batches=6):
    """Keras's own ``fit``, as raytf's hook hands it over inside a worker."""
    import inspect

    method = getattr(keras.Model.fit, "__wrapped__", keras.Model.fit)
    rng = np.random.RandomState(0)
    x, y = rng.randn(batches * 8, 4).astype("float32"), rng.randint(0, 2, batches * 8)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    bound = inspect.signature(method).bind(model, ds, epochs=epochs, verbose=0)
    return fit_resume.fit(method, bound, ctx)


def model_with(optimizer):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    return model


def test_a_recompile_between_two_fits_labels_on():
    ctx = Labels()
    model = model_with(keras.optimizers.Adam())
    fit(ctx, model)
    model.compile(optimizer=keras.optimizers.Adam(1e-4), loss="sparse_categorical_crossentropy")
    fit(ctx, model)
    assert int(model.optimizer.iterations.numpy()) == 12  # the new optimizer's count alone
    assert ctx.labels == list(range(1, 25)) and ctx.last_step == 24


def test_gradient_accumulation_labels_every_batch():
    ctx = Labels()
    model = model_with(keras.optimizers.SGD(gradient_accumulation_steps=3))
    fit(ctx, model)
    assert int(model.optimizer.iterations.numpy()) != 12  # not a batch count
    fit(ctx, model)  # a second call starts where the first ended: 12, not iterations
    assert ctx.labels == list(range(1, 25))


def test_a_loss_scale_optimizer_that_skips_steps_labels_every_batch():
    ctx = Labels()
    optimizer = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(),
        initial_scale=2.0**127,  # every early step overflows
    )
    model = model_with(optimizer)
    fit(ctx, model)
    assert int(model.optimizer.iterations.numpy()) < 12  # overflowing steps not counted
    fit(ctx, model)
    assert ctx.labels == list(range(1, 25))


def test_a_second_model_labels_on_from_the_first():
    ctx = Labels()
    fit(ctx, model_with(keras.optimizers.Adam()))
    fit(ctx, model_with(keras.optimizers.Adam()), epochs=1)
    assert ctx.labels == list(range(1, 19))
