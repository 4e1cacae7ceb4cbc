"""Keras 3 on real MWMS workers: KerasTrainer, step modes, the interactive Session, tf_keras."""

import json
import os

import numpy as np
import pytest

import jobs.train_keras as train_keras
import jobs.train_tf_keras as train_tf_keras
import raytf
from raytf.checkpoint.layout import MANIFEST
from raytf.data.synthetic import make_dataset

from .cluster_state import assert_nothing_left
from .conftest import KERAS_REFERENCE

CONFIG = {"seed": 5, "lr": 3e-3, "batch_size": 64}


def keras_trainer(storage, name, **kwargs):
    options = dict(
        global_batch_size=64,
        epochs=2,
        steps_per_epoch=8,
        validation_fn=train_keras.validation_fn,
        report_every=4,
        train_loop_config=CONFIG,
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(name=name, storage_path=storage, verbose=0),
    )
    options.update(kwargs)
    return raytf.KerasTrainer(train_keras.build_model, train_keras.dataset_fn, **options)


def forward(weights, x):
    """The example MLP in NumPy: the driver checks the workers' metrics without TF."""
    w1, b1, w2, b2, w3, b3 = weights
    h = np.maximum(x @ w1 + b1, 0)
    h = np.maximum(h @ w2 + b2, 0)
    return h @ w3 + b3


def test_fit_metrics_are_global_and_weights_agree(keras_reference):
    """The session's uninterrupted KerasTrainer run (the Keras resume test's reference)."""
    result = keras_reference
    ref = KERAS_REFERENCE
    steps = ref["epochs"] * ref["steps_per_epoch"]
    assert len({r["weights_digest"] for r in result.worker_results}) == 1
    assert [r["steps"] for r in result.worker_results] == [steps, steps]
    history = result.history
    assert len(history["loss"]) == ref["epochs"] and history["loss"][-1] < history["loss"][0]
    assert set(history) == {"loss", "accuracy", "val_loss", "val_accuracy"}

    # val_accuracy must be over every worker's shard: all 1024 held-out examples, not
    # rank 0's 512. Recompute it on the driver from the returned weights.
    x, y = make_dataset(ref["seed"], num_examples=1024, split="validation")
    logits = forward(result.weights, x)
    accuracy = float(np.mean(np.argmax(logits, axis=1) == y))
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = float(-np.mean(log_probs[np.arange(len(y)), y]))
    assert history["val_accuracy"][-1] == pytest.approx(accuracy, abs=1e-6)
    assert history["val_loss"][-1] == pytest.approx(loss, rel=1e-4)
    rank0_only = float(np.mean(np.argmax(logits[0::2], axis=1) == y[0::2]))
    assert rank0_only != pytest.approx(accuracy, abs=1e-6), "pick a seed where shards differ"
    assert_nothing_left()


@pytest.fixture(scope="module")
def compiled_run(ray_cluster, tmp_path_factory):
    storage = str(tmp_path_factory.mktemp("modes"))
    return keras_trainer(storage, "base", validation_fn=None).fit()


@pytest.mark.parametrize(
    "mode,per_call", [("eager", 1), ("compiled", 4), ("xla", 1)], ids=["eager", "x4", "xla"]
)
def test_step_modes_match_compiled(compiled_run, storage, mode, per_call):
    """Same seed, same results: eager (debuggable), multi-step calls and XLA vs compiled."""
    base = compiled_run
    other = keras_trainer(
        storage, mode, validation_fn=None, step_mode=mode, steps_per_call=per_call
    ).fit()

    for a, b in zip(base.weights, other.weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(base.history[key], other.history[key], rtol=1e-5)


def test_session_driven_step_by_step_and_reopened(ray_cluster, storage):
    opts = dict(
        global_batch_size=64,
        validation_fn=train_keras.validation_fn,
        train_loop_config=CONFIG,
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(name="sess", storage_path=storage, verbose=0),
    )
    with raytf.Session(train_keras.build_model, train_keras.dataset_fn, **opts) as s:
        assert s.info["step"] == 0 and s.info["replicas"] == 2
        first = s.fit(steps=6)
        assert first["step"] == 6 and 0.0 <= first["accuracy"] <= 1.0
        # A function on every rank, its values gathered rank-ordered.
        assert s.run(lambda w, k: (w.ctx.rank, w.step * k), 10) == [(0, 60), (1, 60)]
        spread = s.run(lambda w: float(w.model.layers[0].kernel.numpy().std()))
        assert spread[0] == spread[1] > 0  # mirrored: every rank holds the same weights
        # A failing command answers with the rank's traceback; the group goes on.
        with pytest.raises(raytf.RaytfError, match=r"(?s)rank\(s\) \[1\].*ZeroDivisionError"):
            s.run(lambda w: 1 / (w.ctx.rank - 1))
        before = s.evaluate()
        s.fit(steps=10)
        after = s.evaluate()
        assert after["loss"] < before["loss"]
        s.set_learning_rate(1e-4)
        assert s.learning_rate == pytest.approx(1e-4)
        path = s.checkpoint()
        saved_digest = s.weights_digest()
        assert os.path.exists(os.path.join(path, MANIFEST)) and path.endswith("step_000000016")
        s.fit(steps=3)
        assert s.step == 19
        result = s.close()
    assert [r["steps"] for r in result.worker_results] == [19, 19]
    assert len({r["weights_digest"] for r in result.worker_results}) == 1
    with pytest.raises(raytf.SessionClosedError):
        s.fit(steps=1)
    assert_nothing_left()

    # Reopened under the same name: the committed checkpoint, learning rate included;
    # one eager step (print/breakpoint territory) then compiled ones...
    with raytf.Session(train_keras.build_model, train_keras.dataset_fn, **opts) as s:
        assert s.info["step"] == 16
        assert s.weights_digest() == saved_digest
        assert s.learning_rate == pytest.approx(1e-4)
        s.fit(steps=1, step_mode="eager")
        s.fit(steps=2)
        mixed = s.get_weights()
        assert s.run(lambda w: sorted(w._train_fns)) == [["compiled", "eager"]] * 2
    # ...end where three compiled steps from the same checkpoint do.
    with raytf.Session(train_keras.build_model, train_keras.dataset_fn, **opts) as s:
        s.fit(steps=3)
        compiled = s.get_weights()
    for a, b in zip(mixed, compiled, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert_nothing_left()


def test_tf_keras_fit_with_raytf_callback(ray_cluster, storage):
    summary = train_tf_keras.main(
        ["--epochs", "2", "--steps-per-epoch", "16", "--checkpoint-every", "16"]
        + ["--report-every", "4", "--storage", storage, "--name", "legacy"]
    )
    assert summary["digests_agree"] and summary["steps"] == 32
    assert len(summary["history"]["loss"]) == 2
    assert summary["history"]["loss"][1] < summary["history"]["loss"][0]
    assert summary["checkpoint"].endswith("step_000000032")
    with open(os.path.join(summary["checkpoint"], MANIFEST)) as f:
        assert json.load(f)["step"] == 32
    assert_nothing_left()


def test_global_batch_that_does_not_divide_fails_before_start(ray_cluster, storage):
    with pytest.raises(raytf.ConfigError, match="does not divide over 2 replicas.*62 or 64"):
        keras_trainer(storage, "odd", global_batch_size=63)


def test_uneven_shards_fail_clearly_not_in_a_collective(ray_cluster, storage):
    def lopsided(input_context, config):
        import tensorflow as tf

        rows = 64 * (4 + input_context.input_pipeline_id)  # rank 1 has a batch more
        x, y = make_dataset(0, num_examples=rows)
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(32, drop_remainder=True)

    trainer = raytf.KerasTrainer(
        train_keras.build_model,
        lopsided,
        global_batch_size=64,
        train_loop_config=CONFIG,
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(name="uneven", storage_path=storage, verbose=0),
    )
    with pytest.raises(raytf.TrainingFailedError, match="uneven"):
        trainer.fit()
    assert_nothing_left()


def test_keras_callbacks_stop_schedule_and_log_on_the_chief(ray_cluster, storage):
    import keras

    logs = os.path.join(storage, "tb")
    callbacks = [
        # val_loss cannot improve by 10: patience 1 stops after the second epoch, on every rank.
        keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=10.0, patience=1),
        keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.5),
        keras.callbacks.TensorBoard(log_dir=logs, write_graph=False),
    ]
    result = keras_trainer(storage, "cbs", epochs=5, callbacks=callbacks).fit()

    for worker in result.worker_results:
        assert worker["epochs"] == 2 and worker["stopped_early"]
        assert worker["learning_rate"] == pytest.approx(CONFIG["lr"] * 0.25)
    assert len(result.history["loss"]) == 2
    written = sorted(os.listdir(logs))
    assert written == ["train", "validation"], written  # one writer: the chief's
    assert len(os.listdir(os.path.join(logs, "train"))) == 1
    assert_nothing_left()


def test_digits_example_learns_real_data(ray_cluster, storage):
    import jobs.train_digits as train_digits

    summary = train_digits.main(["--epochs", "4", "--storage", storage, "--name", "digits"])
    assert summary["digests_agree"]
    assert summary["final_metrics"]["val_accuracy"] >= 0.9


def custom_setup(worker):
    """A custom loop's pieces, built once per rank: a model, an optimizer, a distributed
    iterator and a compiled step under the worker's strategy."""
    import keras
    import tensorflow as tf

    from raytf.data.synthetic import NUM_CLASSES, NUM_FEATURES, make_dataset

    with worker.strategy.scope():
        model = keras.Sequential([keras.Input((NUM_FEATURES,)), keras.layers.Dense(NUM_CLASSES)])
        optimizer = keras.optimizers.SGD(0.1)
    x, y = make_dataset(0)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64, drop_remainder=True)
    iterator = iter(worker.strategy.experimental_distribute_dataset(ds))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    @tf.function
    def step():
        def replica(x, y):
            with tf.GradientTape() as tape:
                per_example = loss_fn(y, model(x, training=True))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=64)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return worker.strategy.reduce("SUM", worker.strategy.run(replica, next(iterator)), None)

    worker.ctx.restore(model=model, optimizer=optimizer)
    return {"step": step}


def custom_train(worker, n):
    losses = []
    for _ in range(n):
        losses.append(float(worker.state["step"]()))
        worker.step += 1
        worker.ctx.step_end(worker.step)
    return losses


def test_a_custom_loop_session_runs_functions_and_checkpoints(ray_cluster, storage):
    with raytf.Session.custom(
        custom_setup,
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(name="custom", storage_path=storage, verbose=0),
    ) as s:
        first = s.run(custom_train, 5)
        assert first[0] == first[1]  # the global loss, all-reduced: alike on every rank
        later = s.run(custom_train, 20)
        assert later[0][-1] < first[0][0]
        assert s.step == 25
        with pytest.raises(raytf.RaytfError, match="KeyError"):
            s.run(lambda w: w.state["no such piece"])
        assert s.run(lambda w: w.step) == [25, 25]  # the group goes on
        assert s.checkpoint().endswith("step_000000025")
        with pytest.raises(raytf.ConfigError, match="a custom-loop session runs functions"):
            s.fit(steps=1)
    assert_nothing_left()
