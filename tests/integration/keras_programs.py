"""Keras ``fit`` programs as people write them, each run on 2 raytf workers with nothing of
raytf's in the loop (TensorFlow's idiom, its strategy line changed).

    python tests/integration/keras_programs.py --program arrays --storage DIR --name N
    python tests/integration/keras_programs.py --program all ...   # each in turn, one run

Each program is small (3 epochs of 8 steps) and seeded; ``all`` runs every
program in one raytf run, one after the other, as the uninterrupted references
(each program seeds everything it draws from at its start, so its result does
not depend on what ran before it). The last line is a JSON summary: per
program, every rank's weights digest and Keras's ``History``.
``test_keras_programs.py`` kills one rank of each program mid-epoch and holds
the outcome to the reference: bit-identical, or a line on screen that names
what made the resume inexact.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import ray

import raytf
from raytf.data.synthetic import NUM_CLASSES, NUM_FEATURES, make_dataset
from raytf.digests import weights_digest

EPOCHS, STEPS, BATCH = 3, 8, 32
SEED = 7


def _model(keras, *, ema: bool = False, width: int = 32):
    model = keras.Sequential(
        [
            keras.Input((NUM_FEATURES,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dropout(0.1),
            keras.layers.Dense(NUM_CLASSES),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3, use_ema=ema, ema_overwrite_frequency=None),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _data(n: int = STEPS * BATCH):
    x, y = make_dataset(SEED, num_examples=n)
    return x.astype("float32"), y.astype("int64")


KILL_POINTS = ("mid_epoch", "last_batch", "validation", "between_fits", "after_fit")


def _pause(keras, seconds: float, kill_at=None, kill_call: int = 0, marker=None):
    """The callback every program passes to its ``fit`` calls, and ``after_fit()``, called
    after a program's last ``fit``. In the runs a test kills: a pause after each batch,
    and at ``kill_at`` (one of ``KILL_POINTS``, in the second epoch of fit call
    ``kill_call``) rank 1 of the first attempt writes ``marker`` and waits there for the
    test's SIGKILL. The references change no number: the pause and the hold only wait."""

    class Pause(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.epoch, self.calls = -1, 0

        def hold(self, point: str) -> None:
            ctx = raytf.get_context()
            if point != kill_at or ctx.rank != 1 or ctx.attempt != 1:
                return
            with open(marker, "w") as f:
                f.write(point)
            time.sleep(120)  # the test kills this process here

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if seconds:
                time.sleep(seconds)
            if self.calls == kill_call and self.epoch == 1:
                if batch == 1:
                    self.hold("mid_epoch")
                # Keras knows no epoch length for some inputs (None): every program's is STEPS.
                if batch == (self.params.get("steps") or STEPS) - 1:
                    self.hold("last_batch")

        def on_test_batch_end(self, batch, logs=None):
            if self.calls == kill_call and self.epoch == 1 and batch == 0:
                self.hold("validation")

        def on_train_end(self, logs=None):
            self.calls += 1
            if self.calls == kill_call + 1:
                self.hold("between_fits")

        def after_fit(self):
            self.hold("after_fit")

    return Pause()


def arrays(keras, tf, pause):
    """NumPy arrays with batch_size, validation_split and class_weight; fit's default
    shuffle=True."""
    x, y = _data(int(STEPS * BATCH / 0.8))
    model = _model(keras)
    weights = {c: 1.0 + 0.25 * c for c in range(NUM_CLASSES)}
    history = model.fit(
        x,
        y,
        batch_size=BATCH,
        epochs=EPOCHS,
        validation_split=0.2,
        class_weight=weights,
        callbacks=[pause],
        verbose=0,
    )
    return model, history


def generator(keras, tf, pause):
    """A Python generator that never ends, with steps_per_epoch."""
    x, y = _data()

    def batches():
        while True:
            for i in range(0, len(x), BATCH):
                yield x[i : i + BATCH], y[i : i + BATCH]

    model = _model(keras)
    history = model.fit(
        batches(), steps_per_epoch=STEPS, epochs=EPOCHS, callbacks=[pause], verbose=0
    )
    return model, history


def py_dataset(keras, tf, pause):
    """A keras.utils.PyDataset read in order (shuffle=False)."""
    x, y = _data()

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return STEPS

        def __getitem__(self, i):
            return x[i * BATCH : (i + 1) * BATCH], y[i * BATCH : (i + 1) * BATCH]

    model = _model(keras)
    history = model.fit(Batches(), epochs=EPOCHS, shuffle=False, callbacks=[pause], verbose=0)
    return model, history


def callbacks_stream(keras, tf, pause):
    """A repeated tf.data stream (shuffled once, seeded) with sample weights and
    steps_per_epoch, and the callbacks with state: EarlyStopping and ReduceLROnPlateau
    (its decisions show in the History's learning_rate)."""
    x, y = _data()
    w = (1.0 + (y == 0)).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y, w))
    ds = ds.shuffle(256, seed=SEED, reshuffle_each_iteration=False).repeat()
    model = _model(keras)
    stop = keras.callbacks.EarlyStopping(monitor="loss", patience=2, min_delta=0.5)
    plateau = keras.callbacks.ReduceLROnPlateau(
        monitor="loss", factor=0.5, patience=1, min_delta=0.3
    )
    history = model.fit(
        ds.batch(BATCH),
        steps_per_epoch=STEPS,
        epochs=EPOCHS + 1,
        callbacks=[stop, plateau, pause],
        verbose=0,
    )
    return model, history


def seeded_shuffle(keras, tf, pause):
    """tf.data as the guides write it: shuffle(buffer, seed=...) (reshuffled each epoch)."""
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256, seed=SEED).batch(BATCH)
    model = _model(keras)
    history = model.fit(ds, epochs=EPOCHS, callbacks=[pause], verbose=0)
    return model, history


def two_models(keras, tf, pause):
    """A probe model fit first, then the model the program is about: raytf's
    checkpoints hold the first only, and say so."""
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    probe = _model(keras, width=8)
    probe.fit(ds, epochs=1, verbose=0)
    model = _model(keras)
    history = model.fit(ds, epochs=EPOCHS, callbacks=[pause], verbose=0)
    return model, history


def ema_two_fits(keras, tf, pause):
    """Mixed precision (a loss-scale optimizer) with weight averages (use_ema), and a
    second fit of the same model."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        x, y = _data()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
        model = _model(keras, ema=True)
        model.fit(ds, epochs=1, callbacks=[pause], verbose=0)
        history = model.fit(ds, epochs=EPOCHS, callbacks=[pause], verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return model, history


def early_stop(keras, tf, pause):
    """EarlyStopping ends the call after its second epoch of six (the loss never improves
    by 10), then the program goes on (an evaluate, a save, a second phase would)."""
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    model = _model(keras)
    stop = keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10.0)
    history = model.fit(ds, epochs=EPOCHS + 3, callbacks=[stop, pause], verbose=0)
    return model, history


def best_weights(keras, tf, pause):
    """EarlyStopping(restore_best_weights=True) stops after epoch 2 of six and puts epoch
    1's weights back at the end of the call, after its last epoch's end."""
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    model = _model(keras)
    stop = keras.callbacks.EarlyStopping(
        monitor="loss", patience=0, min_delta=10.0, restore_best_weights=True
    )
    history = model.fit(ds, epochs=EPOCHS + 3, callbacks=[stop, pause], verbose=0)
    return model, history


def terminate_on_nan(keras, tf, pause):
    """TerminateOnNaN ends the call in the third of six epochs: a learning-rate schedule
    jumps to 1e30 there, the weights overflow and the loss turns NaN within a batch or
    two, then the program goes on. The checkpoints raytf refuses (NaN weights,
    ``refuse_nonfinite``) are part of what a restart meets."""
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    model = _model(keras)
    jump = keras.callbacks.LearningRateScheduler(lambda epoch, lr: 1e30 if epoch >= 2 else lr)
    nan = keras.callbacks.TerminateOnNaN()
    history = model.fit(ds, epochs=EPOCHS + 3, callbacks=[jump, nan, pause], verbose=0)
    return model, history


def noise_layer(keras, tf, pause):
    """A custom layer drawing noise from its own tf.random.Generator in training."""

    class Noise(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.gen = tf.random.Generator.from_seed(SEED)

        def call(self, x, training=False):
            return x + 0.1 * self.gen.normal(tf.shape(x)) if training else x

    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    model = keras.Sequential(
        [keras.Input((NUM_FEATURES,)), Noise(), keras.layers.Dense(NUM_CLASSES)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = model.fit(ds, epochs=EPOCHS, callbacks=[pause], verbose=0)
    return model, history


def three_fits(keras, tf, pause):
    """Three fit calls of two epochs, the arrays reshuffled in place with NumPy's global
    RNG before each."""
    x, y = _data()
    model = _model(keras)
    for _ in range(3):
        order = np.random.permutation(len(x))
        x, y = x[order], y[order]
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
        history = model.fit(ds, epochs=2, callbacks=[pause], verbose=0)
    return model, history


def batch_norm(keras, tf, pause):
    """Keras's default BatchNormalization (synchronized=False: each rank keeps statistics
    of its own batches) before Dropout, with validation data each rank evaluates with
    its own statistics."""
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    model = keras.Sequential(
        [
            keras.Input((NUM_FEATURES,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.BatchNormalization(),
            keras.layers.Dropout(0.1),
            keras.layers.Dense(NUM_CLASSES),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    val = tf.data.Dataset.from_tensor_slices((x[:64], y[:64])).batch(BATCH)
    history = model.fit(ds, epochs=EPOCHS, validation_data=val, callbacks=[pause], verbose=0)
    return model, history


PROGRAMS = {
    f.__name__: f
    for f in (
        arrays,
        generator,
        py_dataset,
        callbacks_stream,
        seeded_shuffle,
        two_models,
        ema_two_fits,
        early_stop,
        three_fits,
        batch_norm,
        best_weights,
        noise_layer,
        terminate_on_nan,
    )
}


def train_loop(config: dict) -> dict:
    import keras
    import tensorflow as tf

    out = {}
    for name in config["programs"]:
        keras.utils.set_random_seed(SEED)
        pause = _pause(
            keras, config["step_sleep"], config["kill_at"], config["kill_call"], config["marker"]
        )
        with raytf.get_context().strategy.scope():
            model, history = PROGRAMS[name](keras, tf, pause)
        pause.after_fit()
        out[name] = {
            "digest": weights_digest(model.get_weights()),
            "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
        }
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--program", required=True, choices=[*PROGRAMS, "all"])
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--kill-at", choices=KILL_POINTS, help="where rank 1 waits to be killed")
    p.add_argument("--kill-call", type=int, default=0, help="in which fit call (0-based)")
    p.add_argument("--marker", help="the file rank 1 writes when it waits there")
    p.add_argument("--checkpoint-every", type=int, default=4)
    p.add_argument("--storage", required=True)
    p.add_argument("--name", required=True)
    args = p.parse_args(argv)
    programs = list(PROGRAMS) if args.program == "all" else [args.program]
    result = raytf.Trainer(
        train_loop,
        train_loop_config={
            "programs": programs,
            "step_sleep": args.step_sleep,
            "kill_at": args.kill_at,
            "kill_call": args.kill_call,
            "marker": args.marker,
        },
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(
            name=args.name,
            storage_path=args.storage,
            verbose=0,
            checkpoint_config=raytf.CheckpointConfig(checkpoint_every_steps=args.checkpoint_every),
        ),
    ).fit()
    ray.shutdown()
    summary = {
        name: {
            "digests": [r[name]["digest"] for r in result.worker_results],
            "history": result.worker_results[0][name]["history"],
        }
        for name in programs
    }
    summary["attempts"] = result.attempts
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary


if __name__ == "__main__":
    main()
    sys.exit(0)
