"""A worker SIGKILLed in the middle of a Keras 3 fit: the run resumes from the last
checkpoint (taken mid-epoch) and ends exactly as an uninterrupted run, metrics included."""

import pytest

from .jobrun import KERAS_JOB, JobRun

pytestmark = pytest.mark.slow

# 3 epochs of 32 steps; checkpoints every 20 steps fall mid-epoch (20, 40, 60, 80).
ARGS = ["--workers", "2", "--steps", "96", "--steps-per-epoch", "32", "--seed", "4"]
ARGS += ["--checkpoint-every", "20", "--step-sleep", "0.03", "--report-every", "4"]
ARGS += ["--validate", "--max-failures", "2"]


def test_sigkill_mid_fit_resumes_to_the_same_weights_and_metrics(cluster_env, storage):
    ref = JobRun(storage, "ref", *ARGS, env=cluster_env, job=KERAS_JOB).start()
    rc, reference = ref.finish()
    assert rc == 0 and reference, ref.output()[-3000:]

    run = JobRun(storage, "kill", *ARGS, env=cluster_env, job=KERAS_JOB)
    rc, summary = run.finish_after_killing(1, step=50)
    assert rc == 0 and summary, run.output()[-3000:]
    assert summary["attempts"] == 2 and len(summary["failures"]) == 1
    assert summary["digests_agree"]
    assert summary["weights_digest"] == reference["weights_digest"]
    # Epoch 2's metrics span the restart (resumed at step 40 of 33..64): the restored
    # accumulators make them equal to the uninterrupted run's, not just close.
    assert summary["history"] == reference["history"]
    assert summary["final_metrics"] == reference["final_metrics"]
