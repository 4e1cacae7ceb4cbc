"""What protects a run: when checkpoints are taken and how many are kept
(``CheckpointConfig``), how failures are handled (``FailureConfig``), and the
defaults for a run nobody configured, which survive a lost worker or node.

Exported by ``raytf.config``; each dataclass validates itself in
``__post_init__`` and names the bad field and value.
"""

from __future__ import annotations

from dataclasses import dataclass

from raytf.config.checks import count_or_none, positive_or_none
from raytf.errors import ConfigError

# The defaults that protect a run nobody configured.
DEFAULT_KEEP = 3  # committed checkpoints kept when raytf chose the interval
DEFAULT_FAILURES_IN_A_ROW = 3  # infrastructure failures with no new checkpoint between


@dataclass(frozen=True)
class CheckpointConfig:
    """When the driver has every worker checkpoint, and how many committed ones to keep.

    ``checkpoint_every_steps`` is decided by each worker from its step count
    (no message needed, so it costs nothing); ``checkpoint_every_s`` is decided
    by the driver, which then asks the group to save at the next step boundary.
    Both may be set. ``num_to_keep`` counts committed checkpoints only.

    ``async_save`` (the default) takes a snapshot of the state in host memory
    at the agreed step and lets training go on while the files are written
    and uploaded (``raytf.checkpoint.snapshot``); at most one save is being stored
    at a time, and a checkpoint is committed only once every rank's part is
    stored. ``async_save=False`` writes (and uploads) before the loop goes on,
    through a traced save (``raytf.checkpoint.writer``).

    ``checkpoint_score_attribute`` (a metric rank 0 reports) makes
    ``num_to_keep`` keep the best checkpoints by it (``checkpoint_score_order``
    ``"max"`` or ``"min"``) instead of the newest, as Ray Train does; the
    newest is kept as well, since a restart resumes from it. A checkpoint's
    score is the metric of rank 0's last report at or before its step.
    ``Result.best_checkpoints`` lists them, best first. At the end of a run
    that named its Keras model (``ctx.restore(model=...)``), the chief writes
    ``model/model.keras``, and ``model/saved_model`` when
    ``export_saved_model``.

    ``refuse_nonfinite``: the chief checks its trainable weights at each save
    (one reduction) and the driver does not commit a checkpoint holding NaN or
    Inf, which could otherwise push good checkpoints out of ``num_to_keep``.

    With neither interval set, raytf chooses one (``default_interval``): a save
    a minute into the run, then one every 100 times what the last save took (so
    saving costs about 1 % of the time), at least every 30 minutes, keeping the
    newest ``DEFAULT_KEEP`` unless ``num_to_keep`` says otherwise. What a loop
    checkpoints is what it named (``ctx.restore``; a Keras ``fit`` names its
    model). ``default_interval=False``: saves only when asked.

    Raises:
        ConfigError: A field's value is invalid; the message names the field and the
            value, before anything starts.
    """

    num_to_keep: int | None = None
    """Committed checkpoints kept (the newest, or the best by
    ``checkpoint_score_attribute``); None: all, or 3 when raytf chose the interval."""
    checkpoint_every_steps: int | None = None
    """Every rank saves at every N-th step (decided by each rank, no message)."""
    checkpoint_every_s: float | None = None
    """The driver asks for a save at the next step boundary every this many
    seconds."""
    async_save: bool = True
    """Snapshot in host memory and write on a thread (True), or write before the
    loop goes on (False)."""
    checkpoint_score_attribute: str | None = None
    """A metric rank 0 reports, by which ``num_to_keep`` keeps the best
    checkpoints (and the newest)."""
    checkpoint_score_order: str = "max"
    """``"max"`` or ``"min"``: which scores are best."""
    export_saved_model: bool = False
    """A finished run that named its model also writes ``model/saved_model``."""
    refuse_nonfinite: bool = True
    """Do not commit a checkpoint whose trainable weights hold NaN or Inf."""
    default_interval: bool = True
    """With neither interval set, let raytf choose one (about 1 % of the time, at
    least every 30 min); False: save only when asked."""

    @property
    def chosen_interval(self) -> bool:
        """raytf picks the interval: neither was set and ``default_interval`` allows it."""
        unset = self.checkpoint_every_steps is None and self.checkpoint_every_s is None
        return unset and self.default_interval

    @property
    def keep(self) -> int | None:
        """How many committed checkpoints pruning keeps (None: all)."""
        if self.num_to_keep is None and self.chosen_interval:
            return DEFAULT_KEEP
        return self.num_to_keep

    def __post_init__(self) -> None:
        positive_or_none("CheckpointConfig.num_to_keep", self.num_to_keep, integer=True)
        positive_or_none(
            "CheckpointConfig.checkpoint_every_steps", self.checkpoint_every_steps, integer=True
        )
        positive_or_none("CheckpointConfig.checkpoint_every_s", self.checkpoint_every_s)
        for fname in ("async_save", "export_saved_model", "refuse_nonfinite", "default_interval"):
            if not isinstance(getattr(self, fname), bool):
                raise ConfigError(
                    f"CheckpointConfig.{fname} = {getattr(self, fname)!r}: must be a bool"
                )
        attr = self.checkpoint_score_attribute
        if attr is not None and (not isinstance(attr, str) or not attr):
            raise ConfigError(
                f"CheckpointConfig.checkpoint_score_attribute = {attr!r}: "
                "must be the name of a reported metric"
            )
        if self.checkpoint_score_order not in ("max", "min"):
            raise ConfigError(
                f"CheckpointConfig.checkpoint_score_order = {self.checkpoint_score_order!r}: "
                "must be 'max' or 'min'"
            )


@dataclass(frozen=True)
class FailureConfig:
    """How failures are handled.

    ``max_failures``: None (the default) retries infrastructure failures as long as
    the run makes progress: it stops after ``DEFAULT_FAILURES_IN_A_ROW`` with no new
    committed checkpoint between them (a crash loop), never after a number in all (a
    run of days on preemptible nodes). An integer counts failures in all; -1 retries
    without limit; 0 turns recovery off (and the emergency checkpoints and standby
    workers that serve it).

    Infrastructure failures (a worker or node dies, a collective breaks, a
    worker hangs) restart the whole group from the latest committed
    checkpoint. A plain exception in user code is a bug: retrying it only
    repeats it, so it is raised unless ``retry_user_errors`` is set.
    ``hang_timeout_s``: no progress of any kind for that long (an optimizer
    step raytf sees itself, a ``step_end``, a report or heartbeat) ends the
    attempt as hung. ``phase_timeout_s`` replaces it during a phase silent by
    nature (start-up to the first step, a restore, a save, ``evaluate``, or
    ``raytf.slow_phase`` without a limit of its own: ``raytf.worker.liveness``).
    ``unresponsive_timeout_s`` catches a stopped or deadlocked process sooner:
    workers answer polls on a thread of their own, so a busy loop still
    answers within milliseconds. ``standby_workers`` keeps a spare process per
    worker with TensorFlow imported, so a restart skips the 5-7 s import.
    ``emergency_checkpoint``: when a worker dies, the others' state at the last
    step they copied is committed before the restart (``raytf.checkpoint.emergency``
    says where it cannot). ``emergency_every_steps``: how often they copy it;
    None measures the copy in the run and takes it every step where it costs at
    most 1 % of a step, else as seldom as keeps it there (a SIGKILL then redoes
    fewer steps than that; ``raytf.checkpoint.copy_cadence``); 1: every step, nothing
    completed redone, whatever the copy costs.

    Raises:
        ConfigError: A field's value is invalid; the message names the field and the
            value, before anything starts.
    """

    max_failures: int | None = None
    """None: retry infrastructure failures while the run commits between them (a
    4th in a row at one checkpoint ends it); N: N retried in all, the next ends the run;
    -1: no limit; 0: no recovery (no emergency checkpoints or standbys either)."""
    retry_user_errors: bool = False
    """Retry an exception raised by the user's code like a lost worker."""
    hang_timeout_s: float = 120.0
    """No progress of any kind for this long ends the attempt as hung."""
    unresponsive_timeout_s: float = 5.0
    """A worker that answers no poll for this long is stopped or deadlocked."""
    phase_timeout_s: float | None = 1800.0
    """The longest a phase silent by nature (start-up, restore, save, evaluate,
    ``raytf.slow_phase``) may take; None: no limit."""
    standby_workers: bool = True
    """Keep a spare process per worker with TensorFlow imported, for fast restarts
    (started after ``RAYTF_STANDBY_AFTER_S`` of training), pinned to the worker's node;
    a fixed-size group keeps one more on a node with room for a worker, where a lost
    node's rank restarts (``raytf.group.reserve``)."""
    emergency_checkpoint: bool = True
    """When a worker dies, commit the survivors' state before restarting."""
    emergency_every_steps: int | None = None
    """How often that state is copied: None measures it (within 1 % of a step);
    1: every step, no completed step redone."""

    @property
    def recovers(self) -> bool:
        """Is a failed group ever restarted? (Emergency checkpoints and standbys serve that.)"""
        return self.max_failures != 0

    def __post_init__(self) -> None:
        m = self.max_failures
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < -1):
            raise ConfigError(
                f"FailureConfig.max_failures = {m!r}: must be None (raytf's default), an "
                "integer >= 0, or -1 for no limit"
            )
        for fname in ("retry_user_errors", "standby_workers", "emergency_checkpoint"):
            if not isinstance(getattr(self, fname), bool):
                raise ConfigError(
                    f"FailureConfig.{fname} = {getattr(self, fname)!r}: must be a bool"
                )
        count_or_none("FailureConfig.emergency_every_steps", self.emergency_every_steps)
        positive_or_none("FailureConfig.hang_timeout_s", self.hang_timeout_s)
        positive_or_none("FailureConfig.unresponsive_timeout_s", self.unresponsive_timeout_s)
        positive_or_none("FailureConfig.phase_timeout_s", self.phase_timeout_s)
