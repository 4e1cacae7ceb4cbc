"""How a Keras ``fit`` call ends, carried across a restart: a call a callback stopped stays
stopped, and the program's later calls replay with the NumPy state the uninterrupted run
had, however many calls came before.

In-process: real Keras and TensorFlow (the default strategy, one replica), raytf's own
``fit`` wrapper (``raytf.worker.fit.resume``), and a stand-in for the worker's context
that takes a checkpoint at one step (the variables, the added state and the RNGs, as
the checkpointer takes them) and restores it in a second run of the same program: the
restart. Each program's restarted run is held to its uninterrupted one, bit for bit.
"""

from __future__ import annotations

import copy
import inspect
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from raytf.checkpoint.restore import rng_state, set_rng_state
from raytf.worker.fit import resume as fit_resume
from raytf.worker.fit import rng_ends

STEPS, BATCH, SEED = 4, 8, 11


class Context:
    """The parts of ``raytf.worker.context.WorkerContext`` a ``fit`` call uses; one
    checkpoint, taken at the first resumable step at or after ``save_at``."""

    rank, world_size, is_chief = 0, 1, True

    def __init__(self, save_at: int | None = None, checkpoint: dict | None = None):
        self.strategy = tf.distribute.get_strategy()
        self.save_at, self.checkpoint, self.taken = save_at, checkpoint, None
        self._states: dict = {}
        self._tracked: dict | None = None
        self.last_step = 0

    def is_tracking(self) -> bool:
        return self._tracked is not None

    def add_checkpoint_state(self, name, get, set_) -> None:
        self._states[name] = (get, set_)

    def restore(self, **trackables) -> int:
        self._tracked = trackables
        if self.checkpoint is None:
            return 0
        model, optimizer = trackables["model"], trackables["optimizer"]
        optimizer.build(model.trainable_variables)
        for variable, value in zip(model.variables + optimizer.variables, self.checkpoint["v"]):
            variable.assign(value)
        set_rng_state(self.checkpoint["rng"])
        for name, doc in self.checkpoint["states"].items():
            self._states[name][1](doc)
        self.last_step = self.checkpoint["step"]
        return self.last_step

    def step_end(self, step: int, resumable: bool = True) -> None:
        self.last_step = step
        if self.taken is None and self.save_at is not None and resumable and step >= self.save_at:
            model, optimizer = self._tracked["model"], self._tracked["optimizer"]
            self.taken = {
                "step": step,
                "v": [np.array(v.numpy()) for v in model.variables + optimizer.variables],
                "rng": rng_state(),
                "states": json.loads(json.dumps({n: g() for n, (g, _) in self._states.items()})),
            }

    def report(self, metrics: dict) -> None:
        pass

    def set_total_steps(self, steps: int) -> None:
        pass

    def heartbeat(self) -> None:
        pass


def fit(ctx: Context, model, *args, **kwargs):
    """``model.fit(...)`` as a raytf worker runs it."""
    method = keras.Model.fit
    bound = inspect.signature(method).bind(model, *args, **kwargs)
    return fit_resume.fit(method, bound, ctx)


def data(n: int = STEPS * BATCH):
    rs = np.random.RandomState(SEED)
    x = rs.standard_normal((n, 6)).astype("float32")
    return x, (x.sum(axis=1) > 0).astype("int64")


def model_of():
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(8, "relu"), keras.layers.Dense(2)]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def batches(x, y):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)


class StopAt(keras.callbacks.Callback):
    """Stops training after batch ``batch`` of epoch ``epoch`` (as ``TerminateOnNaN`` does
    at a NaN loss)."""

    def __init__(self, epoch: int, batch: int):
        super().__init__()
        self.at, self.epoch = (epoch, batch), -1

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            self.model.stop_training = True


def stopped_early(ctx: Context, how: str):
    """One fit of 6 epochs that a callback stops; the program goes on after it."""
    keras.utils.set_random_seed(SEED)
    x, y = data()
    model = model_of()
    if how == "early_stopping":  # no improvement of 10 in the loss: stops after epoch 2
        stop = keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10.0)
    else:
        stop = StopAt(epoch=1, batch=1)  # TerminateOnNaN's way: mid-epoch
    history = fit(ctx, model, batches(x, y), epochs=6, callbacks=[stop], verbose=0)
    after = np.random.standard_normal(3)  # what the program draws after the call
    return model, history, after


def reshuffled_thrice(ctx: Context):
    """Three fits, each on the arrays reshuffled in place with NumPy's global RNG."""
    keras.utils.set_random_seed(SEED)
    x, y = data()
    model, history = model_of(), None
    for _ in range(3):
        order = np.random.permutation(len(x))
        x, y = x[order], y[order]
        history = fit(ctx, model, batches(x, y), epochs=2, verbose=0)
    return model, history, np.random.standard_normal(3)


def run(program, save_at: int, *args):
    """The uninterrupted run (which also takes the checkpoint at ``save_at``) and a
    restart of the same program from that checkpoint."""
    first = Context(save_at=save_at)
    reference = program(first, *args)
    assert first.taken is not None, "no checkpoint was taken"
    again = Context(checkpoint=copy.deepcopy(first.taken))
    return reference, program(again, *args), first.taken


def same(a, b) -> bool:
    (ma, ha, da), (mb, hb, db) = a, b
    weights = all(np.array_equal(u, v) for u, v in zip(ma.get_weights(), mb.get_weights()))
    return weights and ha.history == hb.history and np.array_equal(da, db)


@pytest.mark.parametrize("how,save_at", [("early_stopping", 8), ("a_callback_mid_epoch", 6)])
def test_a_call_a_callback_stopped_stays_stopped_after_a_restart(how, save_at, capfd):
    """The checkpoint is taken at the stopping epoch's end (step 8 for EarlyStopping,
    step 6 for the stop in epoch 2), then the program fails after ``fit``: the restarted
    call trains no more epochs, and ends with the same weights, History and draws."""
    reference, restarted, taken = run(stopped_early, save_at, how)
    assert taken["step"] == save_at
    assert len(reference[1].history["loss"]) == 2  # the stop did end the call early
    assert taken["states"][fit_resume.STATE_NAME]["stopped"] is True
    assert same(reference, restarted)
    assert restarted[0].stop_training
    assert "not exact" not in capfd.readouterr().out


def test_the_third_fit_call_resumes_after_two_replayed_calls_and_their_reshuffles():
    """Checkpoint in the third call (its first epoch's end, step 20): the two calls before
    return at once, and the in-place reshuffles between them draw what they drew."""
    reference, restarted, taken = run(reshuffled_thrice, 4 * STEPS + STEPS)
    assert taken["states"][fit_resume.STATE_NAME]["call"] == 2
    assert sorted(taken["states"][fit_resume.STATE_NAME]["rng_ends"]) == ["0", "1"]
    assert same(reference, restarted)


def best_weights(ctx: Context):
    """EarlyStopping(restore_best_weights=True) stops after epoch 2 and puts epoch 1's
    weights back in ``on_train_end``, after the last epoch's end."""
    keras.utils.set_random_seed(SEED)
    x, y = data()
    model = model_of()
    stop = keras.callbacks.EarlyStopping(
        monitor="loss", patience=0, min_delta=10.0, restore_best_weights=True
    )
    history = fit(ctx, model, batches(x, y), epochs=6, callbacks=[stop], verbose=0)
    return model, history, np.random.standard_normal(3)


def test_the_last_save_of_a_call_that_restores_its_best_weights_waits_for_them(capfd):
    """A save at the stopping epoch's end (step 8) would hold epoch 2's weights, and the
    restarted call would return with them instead of epoch 1's: that step is not
    resumable, and the save is taken when ``fit`` returns, the best weights back."""
    reference, restarted, taken = run(best_weights, 2 * STEPS)
    place = taken["states"][fit_resume.STATE_NAME]
    assert taken["step"] == 2 * STEPS and place["returned"] is True
    assert same(reference, restarted)
    assert "not exact" not in capfd.readouterr().out


def averaged(ctx: Context):
    """Adam(use_ema=True): fit puts the moving averages into the weights after its last
    epoch's end, before it returns."""
    keras.utils.set_random_seed(SEED)
    x, y = data()
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2)])
    model.compile(
        optimizer=keras.optimizers.Adam(0.05, use_ema=True, ema_overwrite_frequency=None),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = fit(ctx, model, batches(x, y), epochs=2, verbose=0)
    return model, history, np.random.standard_normal(3)


def test_the_last_save_of_a_call_holds_the_averaged_weights_fit_ends_with():
    """A save at the call's last epoch end held the weights before the averages went in,
    and a restart that returned at once from that call kept them: another model. The
    save waits for fit's return."""
    reference, restarted, taken = run(averaged, 2 * STEPS)
    assert taken["states"][fit_resume.STATE_NAME]["returned"] is True
    assert same(reference, restarted)


def test_only_the_newest_ends_are_kept_and_a_replay_past_them_says_so(capfd):
    ends = rng_ends.RngEnds()
    for index in range(rng_ends.KEPT + 3):
        ends.call_starts(index)
        np.random.standard_normal()  # the program draws during the call and after it
        ends.call_ended()
        np.random.standard_normal()
    doc = json.loads(json.dumps(ends.doc()))
    assert len(doc["rng_ends"]) == rng_ends.KEPT and doc["rng_ends_dropped"] == 1
    again = rng_ends.RngEnds()
    again.restore({"call": rng_ends.KEPT + 3, **doc})
    before = np.random.get_state()[1].copy()
    again.replayed(1, rank=0)  # dropped: the state is left as it is, and said
    assert np.array_equal(np.random.get_state()[1], before)
    assert "fit calls 1-2" in capfd.readouterr().out
    again.replayed(2, rank=0)  # kept: put back
    assert json.loads(json.dumps(rng_state())) == doc["rng_ends"]["2"]
