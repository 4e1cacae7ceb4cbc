"""Keras 3's own ``model.fit`` in a ``Trainer`` loop on 2 MWMS workers, a Ray Train script
moved by its imports, and the trained model out of the run (export, load, best checkpoints).

One reference run of jobs/train_keras_fit.py serves the metric, best-checkpoint and export
tests; the SIGKILL test runs the same arguments, paused after each step to be hit mid-fit,
and must end with the same weights.
"""

import contextlib
import io
import os
import re
import signal
import time

import numpy as np
import pytest

import raytf
from jobs.train_keras_fit import validation_set
from raytf.checkpoint.layout import committed
from raytf.rundir.storage import Storage
from raytf.tools.cli import main as cli

from .jobrun import ROOT, JobRun
from .test_keras import forward
from .test_recovery import manifests

pytestmark = pytest.mark.slow

FIT_JOB = os.path.join(ROOT, "jobs", "train_keras_fit.py")
RAY_TRAIN_JOB = os.path.join(ROOT, "jobs", "ray_train_tf.py")
SEED = 3
# 3 epochs of 16 steps, a checkpoint at each epoch end (16, 32, 48); keep the best by val_loss.
ARGS = ["--workers", "2", "--epochs", "3", "--steps-per-epoch", "16", "--seed", str(SEED)]
ARGS += ["--checkpoint-every", "16", "--keep", "1", "--score", "val_loss", "--score-order", "min"]
ARGS += ["--return-weights", "--max-failures", "1"]
# Runs that are killed pause after each step, to be hit mid-fit; their references need not:
# the pause is a callback that changes no number.
PAUSE = ["--step-sleep", "0.05"]


@pytest.fixture(scope="module")
def reference(cluster_env, tmp_path_factory):
    storage = str(tmp_path_factory.mktemp("keras-fit"))
    run = JobRun(storage, "ref", *ARGS, env=cluster_env, job=FIT_JOB).start()
    rc, summary = run.finish()
    assert rc == 0 and summary, run.output()[-3000:]
    return summary


def sparse_ce(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_p[np.arange(len(labels)), labels].mean())


def test_fit_learns_and_its_validation_metrics_cover_every_worker(reference):
    history = reference["history"]
    assert len(history["loss"]) == 3 and history["loss"][-1] < history["loss"][0]
    assert reference["digests_agree"] and reference["steps"] == 48
    weights = [np.asarray(w, dtype=np.float32) for w in reference["weights"]]
    xv, yv = validation_set(SEED)
    logits = forward(weights, xv)
    accuracy = float((logits.argmax(axis=1) == yv).mean())  # all 512 examples, both shards
    assert history["val_accuracy"][-1] == pytest.approx(accuracy, abs=1e-6)
    assert reference["evaluate"]["accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert history["val_loss"][-1] == pytest.approx(sparse_ce(logits, yv), rel=1e-4)
    np.testing.assert_allclose(reference["predictions"], logits[:8], rtol=1e-4, atol=1e-5)


def test_the_best_checkpoint_by_val_loss_is_kept_beside_the_newest(reference):
    val_loss = reference["history"]["val_loss"]
    epoch_end_steps = [16, 32, 48]
    best_step = epoch_end_steps[int(np.argmin(val_loss))]
    assert committed(Storage(reference["run_dir"])) == sorted({best_step, 48})
    best_path, best_score = reference["best_checkpoints"][0]
    assert best_path.endswith(f"step_{best_step:09d}") and best_score == min(val_loss)


def raytf_cli(*args):
    """``raytf ARGS`` run in this process, which has TensorFlow imported already (a
    process of its own imports it again: ~5 s a call); returns what it printed."""
    printed, said = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(said):
        rc = cli(list(args))
    assert rc == 0, said.getvalue()[-3000:]
    return printed.getvalue()


def test_the_model_loads_on_the_driver_and_exports_from_any_checkpoint(reference, tmp_path):
    import keras

    from raytf.result import Result

    xv, _ = validation_set(SEED)
    chief = np.asarray(reference["predictions"])
    result = Result(
        metrics={}, metrics_history=[], path=reference["run_dir"], attempts=1, elapsed_s=0
    )
    final = result.load_model()  # RUN_DIR/model/model.keras, written by the chief
    np.testing.assert_allclose(final.predict(xv[:8], verbose=0), chief, rtol=1e-5, atol=1e-6)

    out = str(tmp_path / "final.keras")
    assert "step 48" in raytf_cli("export", reference["run_dir"], "--out", out)
    exported = keras.models.load_model(out)  # checkpoint 48 = the end of training
    np.testing.assert_allclose(exported.predict(xv[:8], verbose=0), chief, rtol=1e-5, atol=1e-6)

    steps = committed(Storage(reference["run_dir"]))
    if len(steps) > 1:  # the best epoch was not the last: its weights differ from the end's
        older = str(tmp_path / "best_saved_model")
        raytf_cli(
            "export",
            reference["run_dir"],
            "--step",
            str(steps[0]),
            "--format",
            "saved_model",
            "--out",
            older,
        )
        import tensorflow as tf

        loaded = tf.saved_model.load(older)  # held: its functions need its variables
        served = loaded.serve(xv[:8]).numpy()
        by_step = result.load_model(step=steps[0]).predict(xv[:8], verbose=0)
        np.testing.assert_allclose(served, by_step, rtol=1e-5, atol=1e-6)
        assert not np.allclose(served, chief)


def test_sigkill_mid_fit_resumes_to_the_uninterrupted_weights(reference, cluster_env, storage):
    run = JobRun(storage, "kill", *ARGS, *PAUSE, env=cluster_env, job=FIT_JOB)
    rc, summary = run.finish_after_killing(1, step=22)
    assert rc == 0 and summary, run.output()[-3000:]
    assert summary["attempts"] == 2 and len(summary["failures"]) == 1
    assert summary["weights_digest"] == reference["weights_digest"]
    assert summary["history"] == reference["history"]
    # An epoch end, where the callback's loop resumes: 16, or 32 when the driver's state
    # (written once a second) showed step 22 late and the kill came after that commit.
    restored = {int(m) for m in re.findall(r"restored step (\d+)", run.output())}
    assert restored in ({16}, {32}), run.output()[-3000:]


# TensorFlow's idiom as written (no raytf callback, restore, initial_epoch or skip): a finite
# dataset of 32 batches per epoch, checkpoints every 5 steps, so most fall in mid-epoch; a
# seeded image model whose random layers (flip, translation, Dropout) draw at every step.
PROGRAM = ["--plain", "--augment", "--workers", "2", "--epochs", "3", "--steps-per-epoch", "32"]
PROGRAM += ["--seed", str(SEED)]
PLAIN = [*PROGRAM, "--checkpoint-every", "5", "--max-failures", "1"]


def test_tensorflows_idiom_resumes_mid_epoch_to_the_uninterrupted_run(cluster_env, storage):
    """SIGKILL at step 40 (epoch 2, batch 8) or a little later, in a fit with no raytf
    call in the loop: the same fit call resumes at the next batch, with the epoch's
    metric accumulators and the random layers' seed states, and ends with the
    uninterrupted run's weights and History, bit for bit."""
    ref = JobRun(storage, "plain-ref", *PLAIN, env=cluster_env, job=FIT_JOB).start()
    rc, reference = ref.finish()
    assert rc == 0 and reference, ref.output()[-3000:]
    assert reference["steps"] == 96 and len(reference["keras_history"]["loss"]) == 3
    # The state copied at every step (not as often as is cheap): nothing completed redone.
    kill = [*PLAIN, *PAUSE, "--emergency-every", "1"]
    run = JobRun(storage, "plain-kill", *kill, env=cluster_env, job=FIT_JOB).start()
    try:
        before = run.wait_for(step=40)
        run.signal_worker(1, signal.SIGKILL, before)
        rc, summary = run.finish()
    finally:
        run.stop()
    assert rc == 0 and summary, run.output()[-3000:]
    assert summary["attempts"] == 2 and len(summary["failures"]) == 1
    # Resumed in mid-epoch 2 (steps 33..64), right after the survivor's last step.
    restored = {int(m) for m in re.findall(r"restored step (\d+)", run.output())}
    assert len(restored) == 1 and 40 <= min(restored) < 64, restored
    step = restored.pop()
    assert step >= before["last_step"]  # no step the driver saw done was redone
    # The survivor's last step: its emergency checkpoint, or the interval commit of it.
    reason = next(m["reason"] for m in manifests(run.run_dir) if m["step"] == step)
    assert reason == "emergency" or step % 5 == 0, (step, reason)
    assert summary["steps"] == 96  # not an epoch replayed
    assert summary["keras_history"] == reference["keras_history"]
    assert summary["history"] == reference["history"]
    assert summary["weights_digest"] == reference["weights_digest"]
    # Every rank's, BatchNormalization's own moving statistics included.
    assert summary["rank_digests"] == reference["rank_digests"]

    # Nothing configured but the storage: raytf's defaults recover, exactly, all the same.
    run = JobRun(storage, "plain-defaults", *PROGRAM, *PAUSE, env=cluster_env, job=FIT_JOB)
    rc, summary = run.finish_after_killing(1, step=40)
    assert rc == 0 and summary, run.output()[-3000:]
    assert summary["attempts"] == 2 and summary["steps"] == 96
    restored = {int(m) for m in re.findall(r"restored step (\d+)", run.output())}
    assert len(restored) == 1 and 0 < min(restored) <= 96, run.output()[-3000:]
    assert summary["keras_history"] == reference["keras_history"]
    assert summary["rank_digests"] == reference["rank_digests"]


def test_a_ray_train_script_runs_with_only_its_imports_changed(cluster_env, storage):
    """Its own MWMS, TF_CONFIG read by hand, report(checkpoint=), get_checkpoint() after a
    SIGKILL, world rank and size from the context."""
    args = ["--workers", "2", "--epochs", "4", "--steps-per-epoch", "48", "--max-failures", "1"]
    run = JobRun(storage, "ray-train", *args, env=cluster_env, job=RAY_TRAIN_JOB)
    rc, summary = run.finish_after_killing(0, step=60)
    assert rc == 0 and summary, run.output()[-3000:]
    assert summary["attempts"] == 2
    workers = summary["workers"]
    assert [(w["rank"], w["world_size"]) for w in workers] == [(0, 2), (1, 2)]
    assert all(w["resumed"] for w in workers)  # the restarted loop found its checkpoint
    assert workers[0]["history"] == workers[1]["history"]
    reported = sorted(os.listdir(os.path.join(run.run_dir, "train_checkpoints")))
    # One per epoch end: at least one before the kill, four in the restarted attempt.
    assert len([n for n in reported if n.startswith("checkpoint_")]) >= 5
    assert summary["checkpoint"].endswith(reported[-2])  # latest.txt sorts last
    with open(os.path.join(summary["checkpoint"], "model.keras"), "rb") as f:
        assert f.read(2) == b"PK"  # a .keras file is a zip


def tensorflow_idiom():
    """TensorFlow's single-machine code with its strategy line changed, nothing else: no
    raytf call in it. Its first trace and each validation are slower than the test's
    ``hang_timeout_s`` (a layer that sleeps when traced, input that sleeps per batch),
    and so is its training as a whole."""
    import keras
    import tensorflow as tf

    from raytf.data.synthetic import NUM_CLASSES, make_dataset

    class SlowToTrace(keras.layers.Layer):  # a large model's first trace, in miniature
        def call(self, x):
            time.sleep(TRACE_S)  # Python: runs when traced, not per step
            return x

    def slow(x, y):  # input that takes its time
        tf.numpy_function(lambda: time.sleep(0.03), [], [])
        return x, y

    began = time.monotonic()
    strategy = raytf.get_context().strategy  # was: tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = keras.Sequential(
            [
                SlowToTrace(),
                keras.layers.Dense(32, activation="relu"),
                keras.layers.Dense(NUM_CLASSES),
            ]
        )
        model.compile(
            optimizer="adam",
            metrics=["accuracy"],
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    x, y = make_dataset(0)
    train_dataset = tf.data.Dataset.from_tensor_slices((x[:2048], y[:2048])).batch(64)
    val_dataset = tf.data.Dataset.from_tensor_slices((x[2048:2560], y[2048:2560])).batch(64)
    history = model.fit(
        train_dataset.map(slow),
        epochs=3,
        validation_data=val_dataset.map(lambda x, y: slow(*slow(*slow(x, y)))),
        validation_freq=3,
    )
    return {"history": history.history, "loop_s": time.monotonic() - began}


TRACE_S = 3.0
HANG_TIMEOUT_S = 2.0


def test_tensorflows_idiom_runs_with_its_strategy_line_changed_past_the_hang_timeout(
    ray_cluster, storage
):
    """No raytf call in the loop, so every progress the driver sees is its own (the
    optimizer's step counter), and its phases are declared by raytf (start-up, fit's
    first trace, validation): none is a hang, although each is longer than the limit."""
    result = raytf.Trainer(
        tensorflow_idiom,
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(
            storage_path=storage,
            verbose=0,
            failure_config=raytf.FailureConfig(hang_timeout_s=HANG_TIMEOUT_S),
        ),
    ).fit()
    assert result.attempts == 1 and not result.failures
    first, second = (r["history"] for r in result.worker_results)
    assert first == second  # global metrics: every rank reads the same values
    assert first["loss"][-1] < first["loss"][0]
    assert len(first["val_loss"]) == 1
    # Each epoch's metrics reached the driver with no callback in the loop.
    assert result.history == first
    assert [m["step"] for m in result.metrics_history] == [32, 64, 96]  # 2048 / 64 per epoch
    # Keras's progress bar (verbose="auto") on the chief's screen only.
    logs = os.path.join(result.path, "logs")
    bars = []
    for rank in (0, 1):
        with open(os.path.join(logs, f"rank_{rank}.log"), encoding="utf-8") as f:
            bars.append(f.read().count("━"))
    assert bars[0] > 0 and bars[1] == 0, bars
    # Its input runs Python (tf.numpy_function): no exact mid-epoch position, and it says so.
    with open(os.path.join(logs, "rank_0.log"), encoding="utf-8") as f:
        assert "fit checkpoints at epoch ends only: Python code in the pipeline (PyFunc" in f.read()
    # Silent to raytf (no report, no step_end) for several hang timeouts on end.
    assert min(r["loop_s"] for r in result.worker_results) > 4 * HANG_TIMEOUT_S


# Fine-tuning as Keras's guide writes it: fit 2 epochs of 16 steps, compile again (a new
# optimizer, its iterations back at 0), fit 2 more; checkpoints every 5 steps, no raytf call.
FINETUNE = ["--plain", "--finetune", "--workers", "2", "--epochs", "2", "--steps-per-epoch"]
FINETUNE += ["16", "--seed", str(SEED), "--checkpoint-every", "5", "--max-failures", "1"]
FINETUNE += ["--step-sleep", "0.05"]
RECOMPILED = "fit call 2: the model was compiled again after raytf's checkpoints named"


def intact_commits(storage: Storage) -> list[int]:
    """The committed steps, each one's files checked against its manifest."""
    from raytf.checkpoint.layout import verify

    steps = committed(storage)
    damaged = [s for s in steps if verify(storage, s) is None]
    assert steps and not damaged, f"committed {steps}, damaged {damaged}"
    return steps


@pytest.mark.parametrize("where", ["local", "s3"])
def test_fine_tuning_labels_steps_on_and_never_writes_a_commit_again(
    where, cluster_env, storage, tmp_path, request
):
    env, url = cluster_env, storage
    if where == "s3":
        s3 = request.getfixturevalue("s3")
        env, url = {**cluster_env, **s3.env}, f"s3://{s3.make_bucket('raytf-finetune')}/runs"
    run = JobRun(url, "tune", *FINETUNE, env=env, job=FIT_JOB, logs=storage).start()
    try:
        rc, summary = run.finish()
    finally:
        run.stop()
    assert rc == 0 and summary, run.output()[-3000:]
    # The step labels run on across the recompile: 64 steps, never back to 0.
    steps = intact_commits(Storage(run.run_dir))
    assert [s for s in steps if s % 5 == 0] == list(range(5, 65, 5)), steps
    assert Storage(run.run_dir).read_json("state.json")["last_step"] == 64
    assert "not committed" not in run.output() and "not written" not in run.output()
    assert RECOMPILED in run.output()  # what a resume in the second fit cannot restore


def test_a_kill_inside_the_second_fit_resumes_from_an_intact_commit(cluster_env, storage):
    run = JobRun(storage, "tune-kill", *FINETUNE, env=cluster_env, job=FIT_JOB)
    rc, summary = run.finish_after_killing(1, step=40)
    assert rc == 0 and summary, run.output()[-3000:]
    assert summary["attempts"] == 2 and len(summary["failures"]) == 1
    restored = {int(m) for m in re.findall(r"restored step (\d+)", run.output())}
    assert len(restored) == 1 and 35 <= min(restored) < 64, restored
    steps = intact_commits(Storage(run.run_dir))
    assert steps[-1] >= 60 and Storage(run.run_dir).read_json("state.json")["last_step"] == 64
    assert "not written" not in run.output()
    assert RECOMPILED in run.output()  # said at the call: the new optimizer restarts
