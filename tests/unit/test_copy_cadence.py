"""How often the emergency copy is taken: measured in the run, the same steps on every rank."""

import threading

import pytest

from raytf.checkpoint.copy_cadence import (
    BUDGET,
    MAX_EVERY,
    SAMPLES,
    WARMUP,
    Cadence,
    interval,
    measured,
)
from raytf.config import FailureConfig
from raytf.errors import ConfigError


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
    assert run(Cadence(1, agree=lambda c: c), range(1, 21), 0.01, 0.005) == list(range(1, 21))


def test_a_copy_costing_5_percent_is_taken_every_5th_step():
    cadence = Cadence(None, agree=lambda c: c)
    copied = run(cadence, range(1, 101), 0.100, 0.005)
    assert cadence.every == 5 and cadence.cost == pytest.approx((0.05, 0.1))
    # Measuring alternates; then one copy every 5 steps from the last one taken.
    measured = WARMUP + 2 * SAMPLES + 1
    assert copied[: measured // 2] == list(range(1, measured, 2))
    after = [s for s in copied if s > measured]
    assert all(b - a == 5 for a, b in zip(after, after[1:])) and len(after) >= 15
    assert len(copied) / 100 * cadence.cost[0] <= BUDGET * 2  # amortized over the run


def test_a_copy_within_the_budget_is_taken_every_step():
    cadence = Cadence(None, agree=lambda c: c)
    copied = run(cadence, range(1, 61), 0.100, 0.0005)
    assert cadence.every == 1
    assert copied[-30:] == list(range(31, 61))


def test_steps_that_are_not_consecutive_are_all_copied_and_not_timed():
    """Keras's fit with inexact input calls back at epoch ends only: copy each one."""
    cadence = Cadence(None, agree=lambda c: c)
    ends = list(range(32, 32 * 40, 32))
    assert run(cadence, ends, 3.2, 0.5) == ends
    assert cadence.every is None  # nothing to time


def test_the_cost_is_a_median_and_capped():
    assert measured([0.2] * 8, [0.1] * 8) == pytest.approx((1.0, 0.1))
    assert interval((1.0, 0.1)) == MAX_EVERY
    noisy_after = [0.105] * 7 + [5.0]  # one save or validation among them
    noisy_none = [0.1] * 7 + [4.0]
    assert interval(measured(noisy_after, noisy_none)) == 5


def test_the_copys_own_time_is_a_floor_under_a_cost_the_noise_hid():
    """A busy machine's step times can read the copy at 0 % (the goodput rerun of
    2026-12-06 copied every step for it): the copy's own time still counts."""
    assert measured([0.1] * 8, [0.1] * 8) == (0.0, 0.1)
    assert measured([0.1] * 8, [0.1] * 8, [0.005] * 8) == pytest.approx((0.05, 0.1))
    assert measured([0.12] * 8, [0.1] * 8, [0.005] * 8) == pytest.approx((0.2, 0.1))
    cadence = Cadence(None, agree=lambda c: c)
    now = 100.0
    for step in range(1, 60):
        if cadence.copy_now(step, now):
            cadence.copy_took(0.005)  # timed where taken; the steps after show nothing
        now += 0.1
    assert cadence.every == 5 and cadence.cost == pytest.approx((0.05, 0.1))


def test_samples_are_neighbours_and_a_gap_breaks_a_pair():
    """A step after a copy is compared with the step after none beside it; across a gap
    between boundaries the half-pair is dropped, never matched with a later step."""
    cadence = Cadence(None, agree=lambda c: c)
    now, steps = 100.0, [*range(1, 9), *range(20, 26), *range(40, 80)]
    for step in steps:
        copied = cadence.copy_now(step, now)
        assert len(cadence._after_copy) == len(cadence._after_none)
        now += 0.1 + (0.005 if copied else 0.0) + (5.0 if step in (8, 25) else 0.0)
    assert cadence.every == 5 and cadence.cost == pytest.approx((0.05, 0.1))


def test_ranks_agree_on_one_cost_and_copy_at_the_same_steps():
    """Each rank measures its own cost; the copies must be at the same steps, or the
    survivors of a failure hold different steps and their checkpoint is refused."""
    proposals: dict[int, tuple] = {}
    barrier = threading.Barrier(2)

    def agree(rank):
        def f(cost):
            proposals[rank] = cost
            barrier.wait(timeout=10)
            return max(c[0] for c in proposals.values()), max(c[1] for c in proposals.values())

        return f

    results = {}

    def rank_run(rank, copy_s):
        cadence = Cadence(None, agree=agree(rank))
        results[rank] = (cadence, run(cadence, range(1, 101), 0.1, copy_s))

    threads = [threading.Thread(target=rank_run, args=a) for a in ((0, 0.002), (1, 0.007))]
    [t.start() for t in threads]
    [t.join(timeout=20) for t in threads]
    (c0, copied0), (c1, copied1) = results[0], results[1]
    assert proposals[0][0] == pytest.approx(0.02) and proposals[1][0] == pytest.approx(0.07)
    assert c0.every == c1.every == 7 and copied0 == copied1


def test_frequent_failures_shorten_the_interval_to_youngs():
    """A 15 % copy of a 0.88 s step is taken every 15 steps while workers rarely die; at
    a death a minute, every sqrt(2 * 0.15 * 60 / 0.88) = 4.5 steps: redone steps then
    cost more than copies."""
    cost = (0.15, 0.88)
    assert interval(cost) == 15
    assert interval(cost, failure_interval_s=86_400.0) == 15  # a day: the budget rules
    assert interval(cost, failure_interval_s=60.0) == 5
    assert interval((0.005, 0.88), failure_interval_s=60.0) == 1  # cheap: every step
    later = Cadence(None, agree=lambda c: c, cost=cost, failure_interval_s=60.0)
    assert later.every == 5 and later.cost is None  # no measuring in a later attempt


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_the_setting_is_a_whole_number_of_steps(bad):
    with pytest.raises(ConfigError, match="emergency_every_steps"):
        FailureConfig(emergency_every_steps=bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_timeouts_must_be_finite(bad):
    with pytest.raises(ConfigError, match="hang_timeout_s = .*finite"):
        FailureConfig(hang_timeout_s=bad)


def test_the_driver_hands_the_measured_cost_and_the_time_between_restarts_on(tmp_path):
    """Measuring costs ten copies an attempt: the driver keeps what the ranks measured
    (their polls say it) and gives it to the next attempt with the run's seconds
    between restarts; a setting still wins."""
    from raytf import CheckpointConfig
    from raytf.checkpoint.commits import CheckpointCommits
    from raytf.rundir.storage import Storage

    commits = CheckpointCommits(Storage(str(tmp_path)), CheckpointConfig(), world_size=2)
    commits.new_attempt(2)
    first = commits.plan(True)
    assert first.copy_cost is None and first.failure_interval_s is None  # measure
    commits.copy_cost = (0.15, 0.88)  # poll_intake: a poll said so
    commits.new_attempt(2)  # a restart
    later = commits.plan(True)
    assert later.copy_cost == (0.15, 0.88) and later.failure_interval_s > 0
    assert commits.plan(True, every=1).last_step_every == 1
