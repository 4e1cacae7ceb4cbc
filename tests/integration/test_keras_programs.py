"""The matrix of Keras programs people write (``keras_programs.py``), each with rank 1
SIGKILLed at a point of the program and held to its uninterrupted run: it ends
bit-identical (every rank's weights and the ``History``), or it finishes its epochs and
a line on the driver's screen names what made the resume inexact. A silent divergence
fails.

Kill points (``keras_programs.KILL_POINTS``): early in an epoch, at an epoch's last
batch, during fit's validation, between two ``fit`` calls, after the last ``fit``. Rank 1
waits at the point (a marker file says it is there) and the test SIGKILLs it from
outside. CI runs ``CI_MATRIX`` (10 kills); ``RAYTF_KERAS_MATRIX=all`` runs every
program at every point it has (``POINTS``: 43 kills, about 17 minutes here).

The expected outcome of each program was measured here and is asserted, so a program
that was exact cannot quietly become "inexact with a line".
"""

import json
import os
import signal
import time

import pytest

from raytf.rundir.storage import Storage

from .jobrun import ROOT, JobRun

pytestmark = pytest.mark.slow

JOB = os.path.join(ROOT, "tests", "integration", "keras_programs.py")
EXACT, SAID = "exact", "inexact, said"
# program -> the outcome measured here inside its training, and the words of the line for
# an inexact one. Killed between or after its fit calls, every program ends exact: the
# calls that had ended return at once.
EXPECTED = {
    "arrays": (EXACT, None),  # shuffle=True, seeded: the same orders after the restart
    "generator": (SAID, "the input is a Python generator"),
    "py_dataset": (EXACT, None),
    "callbacks_stream": (EXACT, None),
    "seeded_shuffle": (SAID, "reshuffle_each_iteration=True"),
    "two_models": (EXACT, None),
    "ema_two_fits": (EXACT, None),
    "early_stop": (EXACT, None),  # stopped after epoch 2: a restart after it trains no more
    "three_fits": (EXACT, None),  # the calls before return with their NumPy state
    # The lost rank's own statistics: no emergency checkpoint without them, the last commit.
    "batch_norm": (EXACT, None),
    # Killed inside the call: its best weights are not in the checkpoint (said); after
    # it, exact (the save at its last epoch waits for fit's return, the weights back).
    "best_weights": (SAID, "restore_best_weights=True"),
    "noise_layer": (EXACT, None),  # the generator's state is in TF's checkpoint
    "terminate_on_nan": (EXACT, None),  # stopped in epoch 3: a restart after it trains no more
}
ENDED = ("between_fits", "after_fit")
# Programs whose ranks keep values of their own (BatchNormalization's statistics): each
# rank's digest is held to the same rank's in the reference instead.
PER_RANK = {"batch_norm"}
# program -> its kill points, each (point, fit call): the points its calls reach (a call
# of one epoch has no second epoch; validation needs validation data).
ONE_CALL = [("mid_epoch", 0), ("last_batch", 0), ("after_fit", 0)]
POINTS = {
    "arrays": [*ONE_CALL, ("validation", 0)],
    "generator": ONE_CALL,
    "py_dataset": ONE_CALL,
    "callbacks_stream": ONE_CALL,
    "seeded_shuffle": ONE_CALL,
    "two_models": ONE_CALL,
    "ema_two_fits": [("mid_epoch", 1), ("last_batch", 1), ("between_fits", 0), ("after_fit", 0)],
    "early_stop": ONE_CALL,
    "three_fits": [("mid_epoch", 2), ("last_batch", 0), ("between_fits", 1), ("after_fit", 0)],
    "batch_norm": [*ONE_CALL, ("validation", 0)],
    "best_weights": ONE_CALL,
    "noise_layer": ONE_CALL,
    "terminate_on_nan": ONE_CALL,
}
# One kill of each program whose mechanism no unit test holds (the suite's time is
# bounded: noise_layer and best_weights are held in-process, tests/unit/test_fit_ends.py
# and test_worker_checkpointer.py).
CI_MATRIX = [
    (p, "mid_epoch", 0)
    for p in ("arrays", "callbacks_stream", "generator", "py_dataset", "seeded_shuffle")
]
CI_MATRIX += [("two_models", "mid_epoch", 0), ("ema_two_fits", "between_fits", 0)]
CI_MATRIX += [("three_fits", "mid_epoch", 2), ("early_stop", "after_fit", 0)]
CI_MATRIX += [("batch_norm", "validation", 0)]
ALL = [(p, point, call) for p in sorted(POINTS) for point, call in POINTS[p]]
MATRIX = ALL if os.environ.get("RAYTF_KERAS_MATRIX") == "all" else CI_MATRIX


@pytest.fixture(scope="module")
def references(cluster_env, tmp_path_factory):
    """Every program uninterrupted, one after another in one run."""
    storage = str(tmp_path_factory.mktemp("programs"))
    run = JobRun(storage, "ref", "--program", "all", env=cluster_env, job=JOB).start()
    rc, summary = run.finish()
    assert rc == 0 and summary and summary["attempts"] == 1, run.output()[-3000:]
    return summary


def kill_at_marker(run: JobRun, marker: str, timeout: float = 180) -> None:
    """SIGKILL rank 1 once it waits at its kill point (it wrote ``marker``)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(marker):
        assert run.proc.poll() is None, run.output()[-3000:]
        assert time.monotonic() < deadline, f"rank 1 never reached its kill point: {marker}"
        time.sleep(0.1)
    state = Storage(run.run_dir).read_json("state.json")
    run.signal_worker(1, signal.SIGKILL, state)


@pytest.mark.parametrize("program,point,call", MATRIX)
def test_a_killed_program_ends_exact_or_says_why_not(
    program, point, call, references, cluster_env, storage
):
    marker = os.path.join(storage, f"{program}-{point}.at")
    args = ["--program", program, "--kill-at", point]
    args += ["--kill-call", str(call), "--marker", marker]
    run = JobRun(storage, f"kill-{program}-{point}", *args, env=cluster_env, job=JOB).start()
    try:
        kill_at_marker(run, marker)
        rc, summary = run.finish()
    finally:
        run.stop()
    output = run.output()
    assert rc == 0 and summary, output[-3000:]
    assert summary["attempts"] == 2, "the kill did not restart the group"
    got, ref = summary[program], references[program]
    # Finished: every epoch the uninterrupted run trained is in the History.
    assert sorted(got["history"]) == sorted(ref["history"])
    assert len(got["history"]["loss"]) == len(ref["history"]["loss"])
    if program not in PER_RANK:  # their mirrored weights: every rank's the same
        assert len(set(got["digests"])) == 1, "the ranks ended with different weights"
    said = [line for line in output.splitlines() if "not exact" in line]
    # As JSON: a History that holds NaN (terminate_on_nan's) equals itself there.
    same = json.dumps(got, sort_keys=True) == json.dumps(ref, sort_keys=True)
    outcome = EXACT if same else SAID if said else "silent divergence"
    expected, words = EXPECTED[program]
    if point in ENDED and outcome == EXACT:  # the calls had ended: exact, unless the
        # restart read a step inside one (the survivors' copy is taken as often as it
        # is cheap), where an inexact program says so as it does inside the call
        expected = EXACT
    assert outcome == expected, (outcome, said, got, ref)
    if expected == SAID:
        assert any(words in line for line in said), said
