"""How often the emergency copy is taken: measured in the run, the same steps on every rank."""

import threading

import pytest

from raytf.config import FailureConfig
from raytf.errors import ConfigError
from raytf.worker.copy_cadence import BUDGET, MAX_EVERY, SAMPLES, WARMUP, Cadence, every_for


def run(cadence, steps, step_s, copy_s):
    """Drive ``cadence`` over ``steps`` consecutive steps whose time is ``step_s``, plus
    ``copy_s`` for a step that follows a copy; the steps it copied at."""
    now, copied = 100.0, []
    for step in steps:
        if cadence.copy_now(step, now):
            copied.append(step)
            now += copy_s
        now += step_s
    return copied


def test_every_step_when_asked():
    assert run(Cadence(1, agree=lambda k: k), range(1, 21), 0.01, 0.005) == list(range(1, 21))


def test_a_copy_costing_5_percent_is_taken_every_5th_step():
    cadence = Cadence(None, agree=lambda k: k)
    copied = run(cadence, range(1, 101), 0.100, 0.005)
    assert cadence.every == 5 and cadence.share == pytest.approx(0.05)
    # Measuring alternates; then one copy every 5 steps from the last one taken.
    measured = WARMUP + 2 * SAMPLES + 1
    assert copied[: measured // 2] == list(range(1, measured, 2))
    after = [s for s in copied if s > measured]
    assert all(b - a == 5 for a, b in zip(after, after[1:])) and len(after) >= 15
    assert len(copied) / 100 * cadence.share <= BUDGET * 2  # amortized over the run


def test_a_copy_within_the_budget_is_taken_every_step():
    cadence = Cadence(None, agree=lambda k: k)
    copied = run(cadence, range(1, 61), 0.100, 0.0005)
    assert cadence.every == 1
    assert copied[-30:] == list(range(31, 61))


def test_steps_that_are_not_consecutive_are_all_copied_and_not_timed():
    """Keras's fit with inexact input calls back at epoch ends only: copy each one."""
    cadence = Cadence(None, agree=lambda k: k)
    ends = list(range(32, 32 * 40, 32))
    assert run(cadence, ends, 3.2, 0.5) == ends
    assert cadence.every is None  # nothing to time


def test_the_cost_is_a_median_and_capped():
    assert every_for([0.2] * 8, [0.1] * 8) == (MAX_EVERY, 1.0)
    noisy_after = [0.105] * 7 + [5.0]  # one save or validation among them
    noisy_none = [0.1] * 7 + [4.0]
    assert every_for(noisy_after, noisy_none)[0] == 5


def test_ranks_agree_on_the_largest_and_copy_at_the_same_steps():
    """Each rank measures its own cost; the copies must be at the same steps, or the
    survivors of a failure hold different steps and their checkpoint is refused."""
    proposals: dict[int, int] = {}
    barrier = threading.Barrier(2)

    def agree(rank):
        def f(k):
            proposals[rank] = k
            barrier.wait(timeout=10)
            return max(proposals.values())

        return f

    results = {}

    def rank_run(rank, copy_s):
        cadence = Cadence(None, agree=agree(rank))
        results[rank] = (cadence, run(cadence, range(1, 101), 0.1, copy_s))

    threads = [threading.Thread(target=rank_run, args=a) for a in ((0, 0.002), (1, 0.007))]
    [t.start() for t in threads]
    [t.join(timeout=20) for t in threads]
    (c0, copied0), (c1, copied1) = results[0], results[1]
    assert proposals == {0: 2, 1: 7}  # measured apart
    assert c0.every == c1.every == 7 and copied0 == copied1


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_the_setting_is_a_whole_number_of_steps(bad):
    with pytest.raises(ConfigError, match="emergency_every_steps"):
        FailureConfig(emergency_every_steps=bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_timeouts_must_be_finite(bad):
    with pytest.raises(ConfigError, match="hang_timeout_s = .*finite"):
        FailureConfig(hang_timeout_s=bad)
