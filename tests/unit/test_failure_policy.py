import pytest

from raytf.config import FailureConfig
from raytf.driver.failure_policy import Decision, Failure, FailureKind, FailurePolicy, classify
from raytf.errors import (
    CheckpointRestoreError,
    WorkerDiedError,
    WorkerError,
    WorkerHangError,
    WorkerSetupError,
)


@pytest.mark.parametrize(
    "error,kind",
    [
        (WorkerDiedError(1, "gone"), FailureKind.WORKER_DIED),
        (WorkerHangError("stuck"), FailureKind.HANG),
        (WorkerSetupError("no"), FailureKind.SETUP),
        (CheckpointRestoreError("u", "bad"), FailureKind.RESTORE),
        (WorkerError(0, "UnavailableError", "peer", ""), FailureKind.COLLECTIVE),
        (WorkerError(0, "AbortedError", "peer", ""), FailureKind.COLLECTIVE),
        (WorkerError(0, "ValueError", "bug", ""), FailureKind.USER_ERROR),
    ],
)
def test_classify(error, kind):
    assert classify(error) is kind


def failure(kind_error):
    return Failure(classify(kind_error), kind_error, attempt=1)


def test_infrastructure_failures_retry_up_to_the_limit():
    policy = FailurePolicy(FailureConfig(max_failures=2))
    died = failure(WorkerDiedError(0, "x"))
    assert policy.decide(died, 1) is Decision.RETRY
    assert policy.decide(died, 2) is Decision.RETRY
    assert policy.decide(died, 3) is Decision.RAISE


def test_unlimited():
    policy = FailurePolicy(FailureConfig(max_failures=-1))
    assert policy.decide(failure(WorkerHangError("x")), 10_000) is Decision.RETRY


def test_user_errors_raise_unless_configured():
    bug = failure(WorkerError(0, "KeyError", "k", ""))
    assert FailurePolicy(FailureConfig(max_failures=5)).decide(bug, 1) is Decision.RAISE
    lenient = FailurePolicy(FailureConfig(max_failures=5, retry_user_errors=True))
    assert lenient.decide(bug, 1) is Decision.RETRY


def test_damaged_checkpoint_always_falls_back_and_costs_nothing():
    bad = failure(CheckpointRestoreError("u", "DataLossError"))
    assert FailurePolicy(FailureConfig(max_failures=0)).decide(bad, 0) is Decision.RETRY
    assert not bad.kind.counts


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"max_failures": -2}, "max_failures = -2"),
        ({"max_failures": 1.5}, "max_failures = 1.5"),
        ({"hang_timeout_s": 0}, "hang_timeout_s = 0"),
        ({"retry_user_errors": "yes"}, "retry_user_errors = 'yes'"),
    ],
)
def test_bad_failure_config(kwargs, match):
    from raytf import ConfigError

    with pytest.raises(ConfigError, match=match):
        FailureConfig(**kwargs)


def test_a_dependency_error_is_never_retried():
    from raytf.errors import DependencyError

    error = DependencyError("tensorflow 2.22.0 is installed, raytf supports 2.21.*: ...")
    assert classify(error) is FailureKind.DEPENDENCY  # not SETUP, which is retried
    unlimited = FailurePolicy(FailureConfig(max_failures=-1))
    assert unlimited.decide(Failure(FailureKind.DEPENDENCY, error, 1), 1) is Decision.RAISE


def test_the_default_bound_counts_failures_with_no_new_checkpoint_between():
    """A run that commits between failures makes progress and is retried for as long as it
    does; three in a row at one checkpoint are a crash loop, the fourth ends the run."""
    from raytf.driver.failure_policy import failures_in_a_row

    def died(committed):
        return Failure(FailureKind.WORKER_DIED, WorkerDiedError(1, "x"), 1, committed=committed)

    policy = FailurePolicy(FailureConfig())
    progressing = [died(c) for c in (None, 10, 20, 30, 40, 50, 60)]
    assert failures_in_a_row(progressing) == 1
    assert policy.decide(progressing[-1], 7, failures_in_a_row(progressing)) is Decision.RETRY
    looping = [died(10), died(20), died(20), died(20)]
    assert failures_in_a_row(looping[:3]) == 2
    assert failures_in_a_row(looping) == 3
    assert policy.decide(looping[-1], 4, 3) is Decision.RETRY
    looping.append(died(20))
    assert policy.decide(looping[-1], 5, failures_in_a_row(looping)) is Decision.RAISE
    skipped = Failure(FailureKind.RESTORE, CheckpointRestoreError("u", "bad"), 1, committed=20)
    assert failures_in_a_row([*looping[:3], skipped]) == 2  # a damaged checkpoint: not counted
    assert "up to 3 in a row without a new checkpoint" in policy.retry_line(looping[0], 1)


def test_the_run_says_at_its_start_what_protects_it():
    from raytf.config import CheckpointConfig, RunConfig
    from raytf.driver.failure_policy import protection_line

    default = protection_line(RunConfig(name="a", storage_path="/tmp"))
    assert "restarts the group from the newest checkpoint" in default
    assert "up to 3 failures in a row" in default and "max_failures=0" in default
    assert "raytf's interval" in default and "the newest 3 kept" in default
    off = RunConfig(
        name="b",
        storage_path="/tmp",
        failure_config=FailureConfig(max_failures=0),
        checkpoint_config=CheckpointConfig(checkpoint_every_steps=50, num_to_keep=2),
    )
    line = protection_line(off)
    assert "recovery off" in line and "every 50 steps (the newest 2 kept)" in line
