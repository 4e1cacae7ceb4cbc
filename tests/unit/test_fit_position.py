"""Where a plain Keras ``fit`` resumes (raytf.worker.fit.position, fit_resume): the calls
that finish an interrupted one, and the inputs whose position cannot be restored exactly.

The resume itself (weights and History equal to an uninterrupted run's after a SIGKILL
in mid-epoch) runs on real MWMS workers in tests/integration/test_keras_fit.py.
"""

import pytest
import tensorflow as tf

from raytf.errors import ConfigError
from raytf.worker.fit import resume as fit_resume
from raytf.worker.fit.position import (
    EPOCHS,
    STREAM,
    Call,
    InputKind,
    Position,
    classify,
    resume_calls,
    why_not_exact,
)

EXACT_EPOCHS = InputKind(EPOCHS, None, 8)


def test_a_fresh_call_is_keras_own_call():
    assert resume_calls(Position(0, 0, 0, 0), 3, EXACT_EPOCHS) == [Call(0, 0, 3, None, 0)]


def test_mid_epoch_in_epochs_mode_skips_into_the_epoch_then_runs_the_rest_whole():
    # Batch 5 of epoch 2 (0-based 1): the rest of it from element 5, then epoch 3 afresh.
    calls = resume_calls(Position(0, 1, 5, 13), 3, EXACT_EPOCHS)
    assert calls == [Call(5, 1, 2, None, 5), Call(0, 2, 3, None, 0)]


def test_mid_epoch_in_stream_mode_skips_what_the_call_drew():
    stream = InputKind(STREAM, None, 8)
    calls = resume_calls(Position(0, 1, 5, 13), 3, stream)
    # The rest of epoch 2 is 3 steps from element 13; epoch 3 goes on from element 16.
    assert calls == [Call(13, 1, 2, 3, 5), Call(16, 2, 3, 8, 0)]


def test_an_epoch_end_resumes_at_the_next_epoch_and_a_finished_call_runs_nothing():
    assert resume_calls(Position(0, 2, 0, 16), 3, EXACT_EPOCHS) == [Call(0, 2, 3, None, 0)]
    assert resume_calls(Position(0, 2, 0, 16), 3, InputKind(STREAM, None, 8)) == [
        Call(16, 2, 3, 8, 0)
    ]
    assert resume_calls(Position(0, 3, 0, 24), 3, EXACT_EPOCHS) == []
    # The last epoch interrupted: one call, nothing after it.
    assert resume_calls(Position(0, 2, 3, 19), 3, EXACT_EPOCHS) == [Call(3, 2, 3, None, 3)]


def ds(n=64):
    return tf.data.Dataset.range(n)


@pytest.fixture(autouse=True)
def no_global_seed():
    """An unseeded shuffle is one only without a global seed (keras.utils.set_random_seed,
    which other tests call, makes TF derive its op seeds from it)."""
    from tensorflow.python.eager import context

    before = context.global_seed()
    tf.random.set_seed(None)
    yield
    tf.random.set_seed(before)


@pytest.mark.parametrize(
    "make, found",
    [
        (lambda: ds().shuffle(8), "shuffle() without a seed"),
        (lambda: ds().shuffle(8, seed=1), "reshuffle_each_iteration=True"),
        (lambda: ds().map(lambda x: x + tf.cast(tf.random.uniform([]), tf.int64)), "RandomUniform"),
        (
            lambda: ds().map(lambda x: x * 2, num_parallel_calls=2, deterministic=False),
            "deterministic=False",
        ),
        (lambda: ds().map(lambda x: tf.numpy_function(lambda v: v, [x], tf.int64)), "PyFunc"),
    ],
)
def test_inputs_whose_order_differs_after_a_restart_are_named(make, found):
    why = why_not_exact(make().batch(4))
    assert why is not None and found in why, why


def test_a_global_seed_makes_an_unseeded_shuffle_repeat_itself():
    tf.random.set_seed(7)
    assert why_not_exact(ds().shuffle(8, reshuffle_each_iteration=False)) is None


def test_deterministic_inputs_are_exact():
    seeded_once = ds().shuffle(8, seed=1, reshuffle_each_iteration=False).batch(4)
    stateless = ds().map(lambda x: x + tf.cast(tf.random.stateless_uniform([], [1, 2]), tf.int64))
    for dataset in (ds().batch(4), seeded_once, stateless.batch(4).prefetch(2)):
        assert why_not_exact(dataset) is None
    # A seeded reshuffle in a stream too: a resume makes more passes than the run did.
    assert "reshuffle_each_iteration=True" in why_not_exact(ds().shuffle(8, seed=1).repeat())


def test_fits_input_is_classified_as_keras_reads_it():
    assert classify(ds(64).batch(8), None) == InputKind(EPOCHS, None, 8)
    assert classify(ds(64).batch(8).repeat(), 5) == InputKind(STREAM, None, 5)
    reshuffled = classify(ds(64).shuffle(8, seed=1).batch(8).repeat(), 5)
    assert reshuffled.restart_note == reshuffled.why_not_exact  # an epoch start is not exact
    unknown = classify(ds(64).filter(lambda x: x > 3).batch(8), None)
    assert unknown.mode == EPOCHS and unknown.steps is None and unknown.why_not_exact is None
    finite_with_steps = classify(ds(64).batch(8), 4)
    assert "steps_per_epoch with a dataset of finite length" in finite_with_steps.why_not_exact
    arrays = classify([[1.0]], None)
    assert arrays.why_not_exact == "the input is arrays (list), not a tf.data.Dataset"
    assert arrays.steps is None


def test_each_input_form_keeps_its_steps_per_epoch_and_names_what_a_restart_changes(
    monkeypatch,
):
    import keras
    import numpy as np

    from raytf.worker.fit import input_forms

    monkeypatch.setattr(input_forms, "_tf_seed", lambda: None)  # whatever ran before

    class Plain(keras.utils.PyDataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return np.full((2, 1), i, "float32"), np.zeros((2,), "float32")

    class Reshuffled(Plain):
        def on_epoch_end(self):
            pass

    class Endless(keras.utils.PyDataset):
        def __getitem__(self, i):
            return np.zeros((2, 1), "float32"), np.zeros((2,), "float32")

        @property
        def num_batches(self):
            return None

    x = np.zeros((8, 1), "float32")
    cases = {  # input, steps_per_epoch, shuffle -> the restart note's start (None: exact)
        "arrays shuffled, no seed": (x, None, True, "fit(shuffle=True) on arrays"),
        "arrays in order": (x, None, False, None),
        "arrays, fewer steps": (x, 2, False, "steps_per_epoch=2 on arrays"),
        "generator": ((b for b in range(3)), 3, False, "the input is a Python generator"),
        "PyDataset shuffled": (Plain(), None, True, "fit(shuffle=True) on a PyDataset"),
        "PyDataset in order": (Plain(), None, False, None),
        "PyDataset, fewer steps": (Plain(), 4, False, "steps_per_epoch=4 of a PyDataset"),
        "PyDataset changed at epoch ends": (Reshuffled(), None, False, "Reshuffled.on_epoch"),
        "PyDataset without an end": (Endless(), 4, False, "a PyDataset without an end"),
        "a dict of arrays": ({"a": x, "b": [x]}, None, False, None),
        "an iterable of its own": (range(3), None, False, "the input is a range"),
    }
    for name, (data, steps, shuffle, note) in cases.items():
        kind = classify(data, steps, shuffle)
        assert kind.mode == EPOCHS and kind.steps == steps, name
        assert kind.why_not_exact.endswith("not a tf.data.Dataset"), name
        assert (
            (kind.restart_note or None) is None
            if note is None
            else (kind.restart_note.startswith(note))
        ), (name, kind.restart_note)
    monkeypatch.setattr(input_forms, "_tf_seed", lambda: 0)  # orders the same on every run
    assert classify(x, None, True).restart_note is None
    # Every resumed call keeps the call's own steps_per_epoch (a generator's epochs end).
    generator = classify((b for b in range(3)), 24, False)
    assert resume_calls(Position(0, 1, 0, 24), 3, generator) == [Call(0, 1, 3, None, 0)]


def test_a_mid_epoch_checkpoint_with_an_input_that_cannot_resume_there_is_refused():
    saved = {"call": 0, "epoch": 1, "batch": 5, "drawn": 13}
    inexact = InputKind(EPOCHS, "shuffle() without a seed: its order differs on every run", 8)
    with pytest.raises(ConfigError, match="batch 5 of epoch 2 of fit call 1, but this call's"):
        fit_resume._place(saved, 0, 0, inexact)
    at_epoch_end = dict(saved, epoch=2, batch=0, drawn=16)
    assert fit_resume._place(at_epoch_end, 0, 0, inexact) == Position(0, 2, 0, 16)
    assert fit_resume._place(None, 1, 4, inexact) == Position(1, 4, 0, 0)


def test_the_epochs_before_the_restart_lead_the_history():
    import keras

    history = keras.callbacks.History()
    history.epoch, history.history = [2], {"loss": [0.5], "val_loss": [0.7]}
    fit_resume._prepend(history, [(0, {"loss": 0.9}), (1, {"loss": 0.6, "val_loss": 0.8})])
    assert history.epoch == [0, 1, 2]
    assert history.history == {"loss": [0.9, 0.6, 0.5], "val_loss": [0.8, 0.7]}


def test_callbacks_see_one_training_and_the_interrupted_epochs_batch_numbers():
    import keras

    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen.append("begin")

        def on_train_batch_end(self, batch, logs=None):
            seen.append(batch)

        def on_train_end(self, logs=None):
            seen.append("end")

    spliced = fit_resume._Spliced([Record()])
    for n, call in enumerate([Call(5, 1, 2, None, 5), Call(0, 2, 3, None, 0)]):
        spliced.splice(call, first=n == 0, last=n == 1)
        spliced.on_train_begin()
        spliced.on_train_batch_end(0)
        spliced.on_train_end()
    assert seen == ["begin", 5, 0, "end"]


def test_a_resumed_call_keeps_the_steps_per_epoch_the_program_gave():
    """The generator case that trained without end: the resumed call dropped
    ``steps_per_epoch``, so its first epoch was the infinite generator itself."""
    import inspect

    def fit(self, x=None, epochs=1, steps_per_epoch=None, initial_epoch=0, callbacks=None):
        pass

    def endless():
        while True:
            yield 0

    bound = inspect.signature(fit).bind(None, endless(), epochs=3, steps_per_epoch=24)
    kind = classify(bound.arguments["x"], 24, False)
    (call,) = resume_calls(Position(0, 1, 0, 24), 3, kind)
    out = fit_resume._call_args(bound, call, [], kind)
    assert (out.arguments["steps_per_epoch"], out.arguments["initial_epoch"]) == (24, 1)
    stream = InputKind(STREAM, None, 8)
    first, _ = resume_calls(Position(0, 1, 5, 13), 3, stream)
    bound = inspect.signature(fit).bind(None, ds(64).repeat(), epochs=3, steps_per_epoch=8)
    out = fit_resume._call_args(bound, first, [], stream)
    assert out.arguments["steps_per_epoch"] == 3  # the stream's rest of the epoch
