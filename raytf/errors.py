"""The errors raytf raises, each carrying what a user needs to act on it."""

from __future__ import annotations


class RaytfError(Exception):
    """Base class of every error raytf raises on purpose."""


class ConfigError(RaytfError, ValueError):
    """A configuration value is wrong; the message names the field and the value."""


class UnsatisfiableResourcesError(RaytfError):
    """No node of the cluster can ever hold one worker's resources (or the group)."""


class PlacementTimeoutError(RaytfError):
    """The cluster could hold the group but did not free or add room in time."""


class PortClashError(RaytfError):
    """A worker's TF server could not bind the port it was given."""


class WorkerSetupError(RaytfError):
    """Workers did not come up (strategy creation failed or timed out)."""


class UserCodeLoadError(RaytfError):
    """The workers could not load ``train_loop_per_worker`` (e.g. its module is not on the
    cluster). Retrying cannot help, so the run fails at once."""


class WorkerError(RaytfError):
    """User code raised inside a worker. Keeps the rank and the original traceback.

    Args:
        rank: The rank that raised.
        exc_type: The exception's class name (``"ValueError"``).
        message: The exception's message.
        traceback_text: The worker's formatted traceback.
    """

    def __init__(self, rank: int, exc_type: str, message: str, traceback_text: str):
        self.rank = rank
        self.exc_type = exc_type
        self.message = message
        self.traceback_text = traceback_text
        super().__init__(f"rank {rank} raised {exc_type}: {message}")

    def __reduce__(self):
        return (WorkerError, (self.rank, self.exc_type, self.message, self.traceback_text))


class WorkerDiedError(RaytfError):
    """A worker's process or node went away (killed, crashed, node lost).

    Args:
        rank: The rank whose process went away.
        detail: The first line of what Ray said about it (actor died, node lost, ...).
    """

    def __init__(self, rank: int, detail: str):
        self.rank = rank
        self.detail = detail
        super().__init__(f"rank {rank} died: {detail}")

    def __reduce__(self):
        return (WorkerDiedError, (self.rank, self.detail))


class TrainingFailedError(RaytfError):
    """The run ended in failure; ``causes`` lists what went wrong, first cause first.

    ``fit()`` sets ``result`` on it (the partial ``Result``) and raises it ``from`` the
    final cause.

    Args:
        message: The final cause, every failure before it, the rank's traceback.
        causes: The failures, first first. Default None: none.
    """

    def __init__(self, message: str, causes: list[BaseException] | None = None):
        self.causes = list(causes or [])
        super().__init__(message)


class CheckpointRestoreError(RaytfError):
    """A committed checkpoint could not be restored; the driver falls back to an older one.

    Args:
        url: The checkpoint's directory.
        detail: What was wrong with it (a file missing, of another size, unreadable).
    """

    def __init__(self, url: str, detail: str):
        self.url = url
        self.detail = detail
        super().__init__(f"could not restore {url}: {detail}")

    def __reduce__(self):
        return (CheckpointRestoreError, (self.url, self.detail))


class CheckpointMismatchError(ConfigError):
    """A committed checkpoint does not fit the model being restored (its variables' shapes or
    structure differ: the model changed between launches of one run name). Never retried and
    never marks the checkpoint bad: the checkpoint is whole, the model is another.

    Args:
        run_dir: The run directory whose checkpoint was read.
        step: The checkpoint's step, or None when unknown.
        differences: Each variable that differs; the message shows the first 8.
    """

    def __init__(self, run_dir: str, step: int | None, differences: list[str]):
        self.run_dir = run_dir
        self.step = step
        self.differences = list(differences)
        shown = "; ".join(differences[:8])
        more = f"; and {len(differences) - 8} more" if len(differences) > 8 else ""
        at = f"at step {step} " if step is not None else ""
        super().__init__(
            f"the checkpoint {at}of run directory {run_dir} does not fit this model "
            f"({shown}{more}). Nothing in the run directory was changed. To resume, launch "
            "the model the checkpoints were saved from; to train this model, start afresh: "
            "give the run a new RunConfig.name, or set RunConfig(start_fresh=True) to move "
            "this run's files aside (into RUN_DIR/previous/) and begin at step 0"
        )

    def __reduce__(self):
        return (CheckpointMismatchError, (self.run_dir, self.step, self.differences))


class CheckpointStorageError(RaytfError):
    """Storage failed while a worker read a committed checkpoint (after its retries): an
    infrastructure failure, retried like a lost worker. The checkpoint is not to blame.

    Args:
        url: The checkpoint's directory.
        detail: The storage error, after its retries.
    """

    def __init__(self, url: str, detail: str):
        self.url = url
        self.detail = detail
        super().__init__(f"could not read {url} from storage: {detail}")

    def __reduce__(self):
        return (CheckpointStorageError, (self.url, self.detail))


class StorageUnavailableError(RaytfError):
    """The driver could not write the run directory for longer than its limit
    (``RAYTF_STORAGE_OUTAGE_S``): the run stops rather than train on unrecorded."""


class RunDirInUseError(ConfigError):
    """Another live driver holds the run directory's lease: two drivers of one run name
    would write the same checkpoints and prune each other's."""


class LeaseLostError(RunDirInUseError):
    """Another driver took over this driver's lease while it was running (its heartbeat
    stalled past ``RAYTF_LEASE_STALE_S``): it stops writing into the run directory."""


class WorkerHangError(RaytfError):
    """No step progress (or no answer from a worker) within the watchdog's timeout.

    Args:
        detail: What stalled, for how long, past which timeout; the stacks when collected.
    """

    def __init__(self, detail: str):
        self.detail = detail
        super().__init__(detail)

    def __reduce__(self):
        return (WorkerHangError, (self.detail,))


class DataShardError(RaytfError):
    """The workers' Ray Data shards cannot keep the group in step (empty or uneven).

    Not retried: the same data splits the same way on the next attempt.
    """


class DependencyError(WorkerSetupError):
    """An installed TensorFlow, Keras or Ray lacks an internal raytf needs and has no plain
    path around it (``raytf.compat``); the message names the package, the version
    installed and the one supported. Never retried: every attempt has the same install."""
