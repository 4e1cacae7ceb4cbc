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
