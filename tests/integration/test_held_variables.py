"""A resumed attempt makes its variables without MWMS's broadcast, and settles them.

``raytf.checkpoint.unbroadcast.until_restored``: every variable made before the restore
takes its initial value on its own rank; after TensorFlow's read, the ranks compare
digests and the chief sends what they disagree on. What it assumes of the loop is
tried here where it could fail: a variable the checkpoint does not hold (a random
value on each rank), a loop that never calls ``restore`` (its first
``strategy.run`` settles), and ranks that make different variables (refused at the
restore, not a hang). Real MWMS processes on a local Ray cluster; every other resume
test (exact weights after a SIGKILL) runs this path too.
"""

import hashlib
import json
import os
import time

import pytest

import raytf

pytestmark = pytest.mark.slow


def _digest(variables) -> str:
    h = hashlib.sha256()
    for v in variables:
        h.update(v.numpy().tobytes())
    return h.hexdigest()[:16]


def loop(config):
    import keras
    import tensorflow as tf

    from raytf.checkpoint import unbroadcast

    ctx = raytf.get_context()
    strategy = ctx.strategy
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
        optimizer = keras.optimizers.Adam(0.01)
        # Not given to restore: a random value of each rank's own, unless it is settled.
        extra = tf.Variable(tf.random.uniform([32]), name="not_in_the_checkpoint")
    x = tf.random.stateless_normal((4, 8), seed=(1, 2))

    @tf.function
    def train_step():
        def replica():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(x) ** 2) + tf.reduce_sum(extra) * 0.0
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return strategy.run(replica)

    if ctx.attempt == 4 and ctx.rank == 1:
        with strategy.scope():  # a model that differs by rank: refused at the restore
            tf.Variable(1.0, name="rank_1_only")
    start = 0 if ctx.attempt == 3 else ctx.restore(model=model, optimizer=optimizer)
    held_before = getattr(strategy, "_raytf_held_variables", None)
    train_step()
    seen = {
        "attempt": ctx.attempt,
        "start": start,
        "held_then": None if held_before is None else len(held_before),
        "settled": unbroadcast.last_settled,
        "extra": _digest([extra]),
        "model": _digest(model.weights),
    }
    with open(os.path.join(config["dir"], f"a{ctx.attempt}_r{ctx.rank}.json"), "w") as f:
        json.dump(seen, f)
    if ctx.attempt == 3:
        raise RuntimeError("planned, attempt 3 (no restore: nothing to save into)")
    for step in range(start + 2, start + 5):
        train_step()
        ctx.step_end(step)
    if ctx.attempt == 1:
        # The save of step 4 is asynchronous: raised at once, the error could reach the
        # driver before every rank's part (a restart then resumed after step 2: 2 runs in
        # 9). Attempt 2 is to resume after step 4, so its commit comes first.
        _wait_for_commit(ctx.run_dir, 4)
    raise RuntimeError(f"planned, attempt {ctx.attempt}")


def _wait_for_commit(run_dir: str, step: int, timeout_s: float = 60.0) -> None:
    from raytf.checkpoint.layout import is_committed
    from raytf.rundir.storage import Storage

    deadline = time.monotonic() + timeout_s
    while not is_committed(Storage(run_dir), step) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_resumed_attempts_variables_agree_with_or_without_a_restore(
    ray_cluster, storage, tmp_path
):
    trainer = raytf.Trainer(
        loop,
        train_loop_config={"dir": str(tmp_path)},
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(
            storage_path=storage,
            verbose=0,
            checkpoint_config=raytf.CheckpointConfig(checkpoint_every_steps=2),
            failure_config=raytf.FailureConfig(max_failures=3, retry_user_errors=True),
        ),
    )
    # Attempt 4: rank 1 makes one variable more before its restore. Both ranks stop there
    # with the reason, at the restore (a broadcast paired by order would have hung).
    with pytest.raises(raytf.TrainingFailedError, match="attempt 4: .*different numbers"):
        trainer.fit()
    seen = {
        (a, r): json.loads((tmp_path / f"a{a}_r{r}.json").read_text())
        for a in (1, 2, 3)
        for r in (0, 1)
    }
    assert not (tmp_path / "a4_r0.json").exists()  # stopped at its restore
    # Attempt 1 starts fresh: MWMS broadcasts as it always does, nothing is held.
    assert seen[1, 0]["held_then"] is None and seen[1, 0]["settled"] is None
    for a in (1, 2, 3):  # every attempt, every variable the same on both ranks
        assert seen[a, 0]["extra"] == seen[a, 1]["extra"], a
        assert seen[a, 0]["model"] == seen[a, 1]["model"], a
    # Attempt 2 resumed after step 4 with its restore: the variables were held until it,
    # and only the one the checkpoint does not hold was sent from the chief.
    assert seen[2, 0]["start"] == 4
    held, sent = seen[2, 0]["settled"]
    assert held >= 5 and sent == 1, seen[2, 0]  # 4 weights and Adam's slots: restored
    assert seen[2, 1]["settled"] == [held, sent]
    # Attempt 3 resumes but never restores: its first strategy.run settled every variable,
    # 4 weights, the extra, Adam's step and learning rate: the random ones sent (the two
    # kernels and the extra), the constants (biases, step, rate) not.
    held3, sent3 = seen[3, 0]["settled"]
    assert seen[3, 0]["held_then"] == held3 == 7 and sent3 == 3, seen[3, 0]
