"""What a failure is, and whether to retry it. Policies decide; the controller acts.

Pure logic, unit-tested without Ray: the controller classifies what it saw
into a ``Failure`` and asks ``FailurePolicy.decide``.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from raytf.config import FailureConfig
from raytf.config.fault_tolerance import DEFAULT_FAILURES_IN_A_ROW
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
    committed: int | None = None  # the newest committed step when it happened

    @classmethod
    def of(cls, cause: BaseException, attempt: int, latest) -> Failure:
        """``latest``: the newest committed checkpoint (or None) when it happened."""
        return cls(classify(cause), cause, attempt, committed=latest.step if latest else None)

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
        return fc.emergency_checkpoint and fc.recovers and not ray_data

    def decide(self, failure: Failure, failures_so_far: int, in_a_row: int = 1) -> Decision:
        """``failures_so_far`` counts this one too (if it counts); ``in_a_row``: this one
        and those just before it with no new committed checkpoint between
        (``failures_in_a_row``), what the default bound counts."""
        if failure.kind is FailureKind.RESTORE:
            return Decision.RETRY
        if failure.kind is FailureKind.USER_ERROR and not self.config.retry_user_errors:
            return Decision.RAISE
        if failure.kind in (FailureKind.DEPENDENCY, FailureKind.MISMATCH):
            return Decision.RAISE  # every attempt would meet the same install, the same model
        limit = self.config.max_failures
        if limit is None:
            return Decision.RETRY if in_a_row <= DEFAULT_FAILURES_IN_A_ROW else Decision.RAISE
        if limit == -1 or failures_so_far <= limit:
            return Decision.RETRY
        return Decision.RAISE

    def retry_line(self, failure: Failure, failures_so_far: int) -> str:
        """What the driver prints when it retries."""
        limit = self.config.max_failures
        if limit is None:
            allowed = (
                f"failure {failures_so_far}; up to {DEFAULT_FAILURES_IN_A_ROW} in a row "
                "without a new checkpoint are retried"
            )
        else:
            shown = "unlimited" if limit == -1 else str(limit)
            allowed = f"failure {failures_so_far} of {shown} allowed"
        return f"{failure.describe()} -> restarting the whole group ({allowed})"


def protection_line(run_config) -> str:
    """What protects this run, in one line at its start, with the setting that changes it."""
    fc, cc = run_config.failure_config, run_config.checkpoint_config
    if not fc.recovers:
        recovery = "recovery off: a lost worker or node ends the run (FailureConfig.max_failures=0)"
    else:
        bound = {
            None: f"up to {DEFAULT_FAILURES_IN_A_ROW} failures in a row without a new checkpoint",
            -1: "without limit",
        }.get(fc.max_failures, f"up to {fc.max_failures} failures")
        recovery = (
            f"a lost worker or node, or a hang, restarts the group from the newest "
            f"checkpoint ({bound}; FailureConfig(max_failures=0) turns this off)"
        )
        if fc.emergency_checkpoint:
            recovery += ", the survivors' last step committed first"
    if cc.chosen_interval:
        saves = (
            f"checkpoints at raytf's interval (about 1 % of the time, at least every "
            f"30 min; the newest {cc.keep} kept; CheckpointConfig sets your own)"
        )
    elif cc.checkpoint_every_steps is None and cc.checkpoint_every_s is None:
        saves = "checkpoints only when asked (CheckpointConfig.default_interval=False)"
    else:
        every = [f"{cc.checkpoint_every_steps} steps"] if cc.checkpoint_every_steps else []
        every += [f"{cc.checkpoint_every_s:g} s"] if cc.checkpoint_every_s else []
        kept = f"the newest {cc.keep} kept" if cc.keep else "all kept"
        saves = f"checkpoints every {' or '.join(every)} ({kept})"
    return f"protection: {recovery}; {saves}"


def failures_in_a_row(failures: list[Failure]) -> int:
    """The last failure and those just before it that met the same newest committed
    checkpoint: a run that commits between failures is making progress."""
    counted = [f for f in failures if f.kind.counts]
    if not counted:
        return 0
    last = counted[-1].committed
    n = 0
    for f in reversed(counted):
        if f.committed != last:
            break
        n += 1
    return n


def failure_message(error: BaseException, failures: list[Failure]) -> str:
    """What the driver raises: the final cause, every failure before it, the rank's traceback."""
    message = f"training failed: {error}"
    if len(failures) > 1 or (failures and failures[-1].cause is not error):
        listed = "\n".join(f"  {f.describe()}" for f in failures)
        message += f"\n\nfailures ({len(failures)}):\n{listed}"
    if isinstance(error, WorkerError):
        message += f"\n\nTraceback from rank {error.rank}:\n{error.traceback_text}"
    return message
