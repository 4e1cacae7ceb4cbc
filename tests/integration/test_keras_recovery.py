"""A worker SIGKILLed in the middle of a Keras 3 fit: the run resumes from the last
checkpoint (taken mid-epoch) and ends exactly as an uninterrupted run, metrics included."""

import pytest

from .conftest import KERAS_REFERENCE as REF
from .jobrun import KERAS_JOB, JobRun

pytestmark = pytest.mark.slow

# The reference run's settings as the job's options; checkpoints every 20 steps fall
# mid-epoch (20, 40, 60, 80).
ARGS = ["--workers", "2", "--steps", str(REF["epochs"] * REF["steps_per_epoch"])]
ARGS += ["--steps-per-epoch", str(REF["steps_per_epoch"]), "--seed", str(REF["seed"])]
ARGS += ["--batch-size", str(REF["batch_size"]), "--checkpoint-every", "20"]
ARGS += ["--step-sleep", "0.03", "--report-every", "4", "--validate", "--max-failures", "2"]


def test_sigkill_mid_fit_resumes_to_the_same_weights_and_metrics(
    keras_reference, cluster_env, storage
):
    reference = keras_reference
    run = JobRun(storage, "kill", *ARGS, env=cluster_env, job=KERAS_JOB)
    rc, summary = run.finish_after_killing(1, step=50)
    assert rc == 0 and summary, run.output()[-3000:]
    assert summary["attempts"] == 2 and len(summary["failures"]) == 1
    assert summary["digests_agree"]
    assert summary["weights_digest"] == reference.worker_results[0]["weights_digest"]
    # Epoch 2's metrics span the restart (resumed at step 40 or later, of 33..64): the
    # restored accumulators make them equal to the uninterrupted run's, not just close.
    assert summary["history"] == reference.history
    assert summary["final_metrics"] == reference.metrics
