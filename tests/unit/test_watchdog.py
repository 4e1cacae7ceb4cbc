"""The driver's watchdog on a fake clock: hangs, silent ranks, and recovery times."""

from raytf.config import FailureConfig
from raytf.driver.watchdog import Watchdog
from raytf.errors import WorkerHangError
from raytf.messages import Phase

CONFIG = FailureConfig(hang_timeout_s=10.0, unresponsive_timeout_s=5.0)


def nobody_silent(for_s):
    return []


class Silent:
    """silent_ranks: the ranks that answered no poll for ``for_s`` seconds."""

    def __init__(self, ranks):
        self.ranks = ranks
        self.asked: list[float] = []

    def __call__(self, for_s):
        self.asked.append(for_s)
        return self.ranks


def test_no_hang_before_the_timeout_and_a_hang_after_it():
    dog = Watchdog(CONFIG, now=100.0)
    assert dog.check(100.0, nobody_silent) is None
    assert dog.check(109.9, nobody_silent) is None
    hang = dog.check(110.0, nobody_silent)
    assert isinstance(hang, WorkerHangError)
    assert str(hang) == "no progress for 10 s (hang_timeout_s=10)"
    assert "no progress for 25 s" in str(dog.check(125.2, nobody_silent))


def test_activity_resets_the_timer():
    dog = Watchdog(CONFIG, now=100.0)
    dog.on_activity(106.0)
    assert dog.check(115.9, nobody_silent) is None
    assert dog.check(116.0, nobody_silent) is not None


def test_a_new_step_resets_the_timer():
    dog = Watchdog(CONFIG, now=100.0)
    assert dog.on_step(1, 108.0) is None  # no restart began: the first attempt recovers nothing
    assert dog.last_step == 1
    assert dog.check(117.9, nobody_silent) is None
    assert "no progress for 10 s" in str(dog.check(118.0, nobody_silent))


def test_a_repeated_step_is_not_progress():
    dog = Watchdog(CONFIG, now=100.0)
    dog.on_step(5, 101.0)
    assert dog.on_step(5, 109.0) is None
    hang = dog.check(111.0, nobody_silent)
    assert hang is not None and "no progress for 10 s" in str(hang)


def test_attempt_started_resets_the_timer_and_the_last_step():
    dog = Watchdog(CONFIG, now=100.0)
    dog.on_step(7, 101.0)
    dog.attempt_started(150.0, restored_step=0)
    assert dog.last_step is None
    assert dog.check(159.0, nobody_silent) is None
    assert dog.check(160.0, nobody_silent) is not None
    dog.on_step(7, 161.0)  # the same step number in a new attempt is progress
    assert dog.check(170.0, nobody_silent) is None


def test_silent_ranks_are_a_hang_naming_them():
    dog = Watchdog(CONFIG, now=100.0)
    silent = Silent([1, 3])
    hang = dog.check(101.0, silent)  # long before hang_timeout_s
    assert isinstance(hang, WorkerHangError)
    assert str(hang) == (
        "ranks [1, 3] answered no poll for 5 s (stopped or deadlocked; unresponsive_timeout_s)"
    )
    assert silent.asked == [5.0]
    assert dog.check(101.0, Silent([])) is None


def test_recovery_time_is_returned_for_the_first_step_past_the_restored_one():
    dog = Watchdog(CONFIG, now=0.0)
    dog.on_step(40, 50.0)
    dog.restart_began(200.0)
    dog.attempt_started(205.0, restored_step=40)
    assert dog.on_step(40, 206.0) is None  # the restored step itself is not a resumed one
    assert dog.on_step(41, 207.5) == 7.5
    assert dog.on_step(42, 208.0) is None
    assert dog.recoveries_s == [7.5]


def test_recoveries_accumulate_over_restarts():
    dog = Watchdog(CONFIG, now=0.0)
    dog.restart_began(10.0)
    dog.attempt_started(12.0, restored_step=0)
    assert dog.on_step(1, 14.0) == 4.0
    dog.restart_began(100.0)
    dog.attempt_started(101.0, restored_step=20)
    assert dog.on_step(21, 103.25) == 3.25
    assert dog.recoveries_s == [4.0, 3.25]


def test_a_rank_is_silent_only_for_time_the_driver_listened():
    from raytf.group.worker_group import unanswered_for

    # Asked at 10.0 and still unanswered when the driver last waited, at 15.2.
    assert unanswered_for({0: 10.0, 1: 14.0}, listened=15.2, for_s=5.0) == [0]
    # A driver that stalled 8 s after its last wait (a commit's write to a storage
    # endpoint that went away) asks again when it is back: nobody is silent for that.
    assert unanswered_for({0: 18.0, 1: 18.0}, listened=18.2, for_s=5.0) == []
    assert unanswered_for({}, listened=100.0, for_s=5.0) == []  # every rank answered


def test_a_silent_phase_within_its_limit_holds_the_hang_clock_and_one_past_it_is_named():
    config = FailureConfig(hang_timeout_s=10.0, unresponsive_timeout_s=5.0, phase_timeout_s=60.0)
    dog = Watchdog(config, now=100.0)
    # Rank 0 restores for 50 s; rank 1 waits, silent, in its first collective.
    dog.on_phases(0, (Phase("restore", 50.0),), 150.0)
    dog.on_phases(1, (), 150.0)
    assert dog.check(150.0, nobody_silent) is None
    # The phase ends: the hang clock starts again from the last check, not from 100.
    dog.on_phases(0, (), 151.0)
    assert dog.check(159.9, nobody_silent) is None
    assert "no progress for 10 s" in str(dog.check(160.0, nobody_silent))
    # Past the default limit, or past the loop's own.
    dog.on_phases(1, (Phase("checkpoint save", 61.0),), 161.0)
    assert str(dog.check(161.0, nobody_silent)) == (
        "rank 1: checkpoint save has been silent for 61 s, past its limit of 60 s (phase_timeout_s)"
    )
    dog.on_phases(1, (Phase("building the index", 31.0, limit_s=30.0),), 162.0)
    assert "past its limit of 30 s (the loop's limit)" in str(dog.check(162.0, nobody_silent))
    # A silent rank is found first, as fast as before, whatever phase another is in.
    dog.on_phases(1, (Phase("restore", 1.0),), 163.0)
    assert "ranks [0] answered no poll" in str(dog.check(163.0, Silent([0])))


def test_a_phase_ages_on_the_drivers_clock_between_polls():
    """A rank whose polls stop mid-phase (unresponsive_timeout_s=None) cannot hold the
    hang clock at the age it last said."""
    config = FailureConfig(hang_timeout_s=10.0, unresponsive_timeout_s=None, phase_timeout_s=60.0)
    dog = Watchdog(config, now=100.0)
    dog.on_phases(0, (Phase("restore", 20.0),), 100.0)
    assert dog.check(139.0, nobody_silent) is None
    assert "restore has been silent for 61 s" in str(dog.check(141.0, nobody_silent))


def test_a_new_attempt_forgets_the_last_attempts_phases():
    dog = Watchdog(CONFIG, now=100.0)
    dog.on_phases(0, (Phase("restore", 5.0),), 100.0)
    dog.attempt_started(200.0, restored_step=10)
    assert "no progress for 10 s" in str(dog.check(210.0, nobody_silent))


def test_a_resumed_fits_skip_through_its_input_has_the_time_it_grows_by():
    """A long stream resumed near its end skips through what it drew before: the phase's
    limit is phase_timeout_s plus what the skip may take (``resume.skip_allowance``)."""
    from raytf.worker.fit.resume import skip_allowance

    # 30,000 batches drawn in 600 s of training; the second call of a split skips 30,004.
    resumed = {"drawn": 30000, "seconds": 600.0}
    allowance = skip_allowance(30004, resumed)
    assert allowance == 2 * 30004 * 600.0 / 30000  # Keras's look, then the call's iterator
    assert skip_allowance(0, resumed) == 0.0 and skip_allowance(5, None) == 0.0
    config = FailureConfig(hang_timeout_s=10.0, unresponsive_timeout_s=5.0, phase_timeout_s=60.0)
    dog = Watchdog(config, now=100.0)
    name = "fit's first step after skipping 30004 batches of its input"
    dog.on_phases(0, (Phase(name, 60.0 + allowance - 1, extra_s=allowance),), 200.0)
    assert dog.check(200.0, nobody_silent) is None  # past phase_timeout_s, within the skip's
    dog.on_phases(0, (Phase(name, 60.0 + allowance + 1, extra_s=allowance),), 201.0)
    assert str(dog.check(201.0, nobody_silent)).endswith(
        f"past its limit of {60 + allowance:g} s (phase_timeout_s + {allowance:.0f} s for the "
        "input's skip)"
    )
