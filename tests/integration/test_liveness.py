"""A restore and a save longer than ``hang_timeout_s`` are phases, not hangs.

The loop keeps per-rank state of its own in every checkpoint
(``add_checkpoint_state``) whose getter and setter are slow, as a large
user-side state would be: every save, every step's copy for an emergency
checkpoint and the restore after a restart are silent for longer than the
hang timeout. (TensorFlow's ``fit`` idiom, silent to
raytf for the whole run, with a slow first trace and validation:
``test_keras_fit.py``.)
"""

import os
import time

import raytf

SLOW_S = 2.5
HANG_TIMEOUT_S = 1.5
STEPS = 8
EVERY = 4


def loop_with_slow_state(config):
    import keras

    ctx = raytf.get_context()

    step = 0

    def get():  # slow at checkpoint steps: the step's emergency copy, then the save
        if step % EVERY == 0:
            time.sleep(SLOW_S)
        return {"rank": ctx.rank}

    def set_(value):
        time.sleep(SLOW_S)

    ctx.add_checkpoint_state("slow", get, set_)
    with ctx.strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.1)
    start = ctx.restore(model=model, optimizer=optimizer)
    began = time.monotonic()
    marker = os.path.join(config["dir"], "failed_once")
    for step in range(start + 1, STEPS + 1):
        time.sleep(0.05)
        ctx.step_end(step)  # saves at 4 and 8: each slower than the hang timeout
        if step == 6 and ctx.rank == 1 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("injected once, after the save at step 4 committed")
    return {"start": start, "loop_s": time.monotonic() - began}


def test_a_slow_restore_and_slow_saves_are_not_hangs(ray_cluster, storage, tmp_path):
    result = raytf.Trainer(
        loop_with_slow_state,
        train_loop_config={"dir": str(tmp_path)},
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(
            storage_path=storage,
            verbose=0,
            checkpoint_config=raytf.CheckpointConfig(
                checkpoint_every_steps=EVERY, async_save=False
            ),
            failure_config=raytf.FailureConfig(
                max_failures=1,
                retry_user_errors=True,
                hang_timeout_s=HANG_TIMEOUT_S,
                emergency_every_steps=1,  # the copy at every step, the slow ones included
            ),
        ),
    ).fit()
    # The one failure is the injected one: no save, no restore was taken for a hang.
    assert result.attempts == 2 and len(result.failures) == 1, result.failures
    assert "injected once" in result.failures[0]
    starts = [r["start"] for r in result.worker_results]
    assert starts == [4, 4], starts  # resumed from the committed save: a restore ran
    # The resumed attempt's step-8 copy and save alone kept the loop silent that long.
    assert min(r["loop_s"] for r in result.worker_results) > 2 * HANG_TIMEOUT_S
