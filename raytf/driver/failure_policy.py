"""What a failure is, and whether to retry it. Policies decide; the controller acts.

Pure logic, unit-tested without Ray: the controller classifies what it saw
into a ``Failure`` and asks ``FailurePolicy.decide``.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from raytf.config import FailureConfig
from raytf.errors import (
    CheckpointMismatchError,
    CheckpointRestoreError,
    CheckpointStorageError,
    DependencyError,
    WorkerDiedError,
    WorkerError,
    WorkerHangError,
    WorkerSetupError,
)

# Errors a worker sees because a peer failed: the group broke, not the user's code.
COLLATERAL_ERRORS = frozenset(
    {"AbortedError", "UnavailableError", "CancelledError", "DeadlineExceededError"}
)


class FailureKind(enum.Enum):
    USER_ERROR = "user_error"  # the user's code raised: a bug
    WORKER_DIED = "worker_died"  # process or node gone
    COLLECTIVE = "collective"  # a collective broke because a peer went away
    HANG = "hang"  # no progress within the watchdog's timeout
    SETUP = "setup"  # the group could not be started
    DEPENDENCY = "dependency"  # an installed package lacks what raytf needs: a retry cannot help
    RESTORE = "restore"  # a committed checkpoint is damaged: marked bad, the one before tried
    MISMATCH = "checkpoint_mismatch"  # the checkpoints do not fit this model: stop, touch none
    STORAGE = "storage"  # the store failed while a checkpoint was read (after retries)

    @property
    def is_infrastructure(self) -> bool:
        return self not in (FailureKind.USER_ERROR, FailureKind.MISMATCH)

    @property
    def counts(self) -> bool:
        """A damaged checkpoint is skipped and never tried again, so it costs no retry."""
        return self is not FailureKind.RESTORE


def classify(error: BaseException) -> FailureKind:
    if isinstance(error, WorkerDiedError):
        return FailureKind.WORKER_DIED
    if isinstance(error, WorkerHangError):
        return FailureKind.HANG
    if isinstance(error, DependencyError):
        return FailureKind.DEPENDENCY
    if isinstance(error, WorkerSetupError):
        return FailureKind.SETUP
    if isinstance(error, CheckpointRestoreError):
        return FailureKind.RESTORE
    if isinstance(error, CheckpointMismatchError):
        return FailureKind.MISMATCH
    if isinstance(error, CheckpointStorageError):
        return FailureKind.STORAGE
    if isinstance(error, WorkerError) and error.exc_type in COLLATERAL_ERRORS:
        return FailureKind.COLLECTIVE
    return FailureKind.USER_ERROR


_PRIORITY = [
    FailureKind.MISMATCH,
    FailureKind.USER_ERROR,
    FailureKind.DEPENDENCY,
    FailureKind.RESTORE,
    FailureKind.STORAGE,
    FailureKind.WORKER_DIED,
    FailureKind.HANG,
    FailureKind.SETUP,
    FailureKind.COLLECTIVE,
]


def pick_root_cause(errors: list[BaseException]) -> BaseException:
    """The error to act on and show: a user's own exception beats a peer's collective abort,
    a dead worker beats the errors its death caused in the others."""
    return min(errors, key=lambda e: _PRIORITY.index(classify(e)))


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    cause: BaseException
    attempt: int
    at: float = field(default_factory=time.time)

    def describe(self) -> str:
        return f"attempt {self.attempt}: {self.kind.value}: {self.cause}"


class Decision(enum.Enum):
    RETRY = "retry"
    RAISE = "raise"


class FailurePolicy:
    def __init__(self, config: FailureConfig):
        self.config = config

    def uses_emergency(self, ray_data: bool) -> bool:
        """Whether workers keep a step's state for an emergency checkpoint: not with Ray
        Data input, whose shards resume at epoch boundaries only."""
        fc = self.config
        return fc.emergency_checkpoint and fc.max_failures != 0 and not ray_data

    def decide(self, failure: Failure, failures_so_far: int) -> Decision:
        """``failures_so_far`` counts this one too (if it counts)."""
        if failure.kind is FailureKind.RESTORE:
            return Decision.RETRY
        if failure.kind is FailureKind.USER_ERROR and not self.config.retry_user_errors:
            return Decision.RAISE
        if failure.kind in (FailureKind.DEPENDENCY, FailureKind.MISMATCH):
            return Decision.RAISE  # every attempt would meet the same install, the same model
        if self.config.max_failures == -1 or failures_so_far <= self.config.max_failures:
            return Decision.RETRY
        return Decision.RAISE

    def retry_line(self, failure: Failure, failures_so_far: int) -> str:
        """What the driver prints when it retries."""
        limit = self.config.max_failures
        shown = "unlimited" if limit == -1 else str(limit)
        return (
            f"{failure.describe()} -> restarting the whole group "
            f"(failure {failures_so_far} of {shown} allowed)"
        )


def failure_message(error: BaseException, failures: list[Failure]) -> str:
    """What the driver raises: the final cause, every failure before it, the rank's traceback."""
    message = f"training failed: {error}"
    if len(failures) > 1 or (failures and failures[-1].cause is not error):
        listed = "\n".join(f"  {f.describe()}" for f in failures)
        message += f"\n\nfailures ({len(failures)}):\n{listed}"
    if isinstance(error, WorkerError):
        message += f"\n\nTraceback from rank {error.rank}:\n{error.traceback_text}"
    return message
