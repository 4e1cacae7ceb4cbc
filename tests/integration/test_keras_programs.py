"""The matrix of Keras programs people write (``keras_programs.py``), each with rank 1
SIGKILLed (mid-epoch, after a fit a callback stopped, in a third fit call) and held to
its uninterrupted run: it ends bit-identical (every rank's
weights and the ``History``), or it finishes its epochs and a line on the driver's screen
names what made the resume inexact. A silent divergence fails.

The expected outcome of each program was measured here and is asserted, so a program
that was exact cannot quietly become "inexact with a line".
"""

import os

import pytest

from .jobrun import ROOT, JobRun

pytestmark = pytest.mark.slow

JOB = os.path.join(ROOT, "tests", "integration", "keras_programs.py")
EXACT, SAID = "exact", "inexact, said"
# program -> the outcome measured here, and the words of the line for an inexact one.
EXPECTED = {
    "arrays": (EXACT, None),  # shuffle=True, seeded: the same orders after the restart
    "generator": (SAID, "the input is a Python generator"),
    "py_dataset": (EXACT, None),
    "callbacks_stream": (EXACT, None),
    "seeded_shuffle": (SAID, "reshuffle_each_iteration=True"),
    "two_models": (EXACT, None),
    "ema_two_fits": (EXACT, None),
    "early_stop": (EXACT, None),  # stopped at step 16: the restarted call trains no more
    "three_fits": (EXACT, None),  # the two calls before return with their NumPy state
    # The lost rank's own statistics: no emergency checkpoint without them, the last commit.
    "batch_norm": (EXACT, None),
}
# 8 steps an epoch, a checkpoint every 4: the kill lands in the second or third epoch; for
# early_stop after its fit stopped (step 16), for three_fits in its third call (33-48).
KILL_AFTER_STEP = {"early_stop": 16, "three_fits": 36}


@pytest.fixture(scope="module")
def references(cluster_env, tmp_path_factory):
    """Every program uninterrupted, one after another in one run."""
    storage = str(tmp_path_factory.mktemp("programs"))
    run = JobRun(storage, "ref", "--program", "all", env=cluster_env, job=JOB).start()
    rc, summary = run.finish()
    assert rc == 0 and summary and summary["attempts"] == 1, run.output()[-3000:]
    return summary


@pytest.mark.parametrize("program", sorted(EXPECTED))
def test_a_killed_program_ends_exact_or_says_why_not(program, references, cluster_env, storage):
    args = ["--program", program, "--step-sleep", "0.1"]
    run = JobRun(storage, f"kill-{program}", *args, env=cluster_env, job=JOB)
    rc, summary = run.finish_after_killing(1, step=KILL_AFTER_STEP.get(program, 10))
    output = run.output()
    assert rc == 0 and summary, output[-3000:]
    assert summary["attempts"] == 2, "the kill did not restart the group"
    got, ref = summary[program], references[program]
    # Finished: every epoch the uninterrupted run trained is in the History.
    assert sorted(got["history"]) == sorted(ref["history"])
    assert len(got["history"]["loss"]) == len(ref["history"]["loss"])
    assert len(set(got["digests"])) == 1, "the ranks ended with different weights"
    said = [line for line in output.splitlines() if "not exact" in line]
    outcome = EXACT if got == ref else SAID if said else "silent divergence"
    expected, words = EXPECTED[program]
    assert outcome == expected, (outcome, said, got, ref)
    if expected == SAID:
        assert any(words in line for line in said), said
