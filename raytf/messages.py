"""Every type that crosses the driver/worker boundary, in one place.

The driver and the worker actor agree on these and on nothing else: the
driver never imports the actor's module, and a new field is added here once.
They travel through Ray (pickled), so each is a small frozen dataclass of
plain values.

Worker to driver, drained by the driver's poll: ``WorkerPoll`` carries the
``Report``s, ``CheckpointPart``s, ``ShardEpoch``s and session ``Reply``s the
worker produced since the last poll. Driver to worker: ``CheckpointPlan`` (each
attempt's checkpoint settings), ``Command`` (one step of an interactive session);
``WorkerInfo`` is the worker's answer to the
group's port reservation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# A worker's state, as its poll says: before start, running the user's function, done.
IDLE, RUNNING, FINISHED, FAILED = "idle", "running", "finished", "failed"


@dataclass(frozen=True)
class WorkerInfo:
    """Where a worker lives; what ``raytf status`` shows and tests signal."""

    rank: int
    node_ip: str
    node_id: str
    hostname: str
    pid: int
    port: int
    gpu_ids: tuple[str, ...]


@dataclass(frozen=True)
class SetupReply:
    """A worker's answer once its MWMS exists: the replicas in sync, and the probes of
    the private APIs raytf uses (``raytf.compat.ProbeReport``), compared across ranks."""

    replicas: int
    probes: Any
    source: str | None = None  # the worker's raytf.compat.source_digest()


@dataclass(frozen=True)
class Report:
    """One call of ``report`` on one worker."""

    rank: int
    metrics: dict[str, Any]
    examples: int | None
    time: float


@dataclass(frozen=True)
class Reply:
    """A worker's answer to one command of an interactive session."""

    rank: int
    command_id: int
    value: Any


@dataclass(frozen=True)
class Command:
    """One command of an interactive session; every rank runs each, in the same order."""

    id: int
    op: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointPlan:
    """What every worker's checkpointer is told at the start of an attempt."""

    dir: str  # the checkpoints' directory, relative to the run
    every_steps: int | None = None
    async_save: bool = True
    restore_url: str | None = None  # None: a fresh start
    keep_last_step: bool = False  # keep each step's state for an emergency checkpoint
    last_step_every: int | None = None  # copy it every N steps; None: as often as is cheap
    copy_cost: tuple[float, float] | None = None  # the copy's (share of a step, step s), measured
    failure_interval_s: float | None = None  # the run's seconds between restarts so far
    refuse_nonfinite: bool = True  # the chief checks its weights at every save
    saved_model: bool = False  # the final model as a SavedModel too
    attempt: int = 1  # which attempt of the run this is (what its ranks agree was before it)


@dataclass(frozen=True)
class CheckpointPart:
    """One rank's report that its part of the checkpoint at ``step`` is written."""

    rank: int
    step: int
    files: dict[str, int]  # name -> size in bytes, in the step directory once committed
    seconds: float  # how long the training loop stood still for it
    reason: str = "interval"  # interval | time | termination | resize | session
    persist_seconds: float = 0.0  # from the save's start until it was stored
    digest: str | None = None  # an emergency part: SHA-256 of the state it holds
    copy_id: str | None = None  # this node's copy in host memory (raytf.checkpoint.host_copy)
    structure: dict | None = None  # the TF files' writer: its models' shapes (worker.structure)
    finite: bool | None = None  # the chief: its weights were all finite (None: not checked)
    # Its folder of its own (raytf.checkpoint.layout.staged_dir), moved into the step at
    # a local commit, named by an object store's; None: written into the step's
    # directory itself (before staging).
    staged: str | None = None
    # An emergency part of a rank that keeps its own values of some variables (each
    # worker's BatchNormalization statistics, raytf.checkpoint.rank_local): a dead rank's
    # die with it, and no survivor's stand for them.
    own_state: bool = False


@dataclass(frozen=True)
class ShardEpoch:
    """One rank's shard of one dataset reached the end of an epoch."""

    rank: int
    dataset: str
    epoch: int  # 0-based, counted by this attempt
    batches: int  # per-replica batches the shard gave
    rows: int  # rows in those batches
    batch_size: int  # per-replica batch size


@dataclass(frozen=True)
class Phase:
    """A phase a worker is in that makes no progress by nature (raytf.worker.liveness)."""

    name: str
    age_s: float  # how long it has been open, at the poll
    limit_s: float | None = None  # the loop's own limit; None: FailureConfig.phase_timeout_s
    # Added to the limit: what a resumed fit's skip of its input to its place may take.
    extra_s: float = 0.0


@dataclass(frozen=True)
class WorkerPoll:
    """One answer to the driver's poll: what happened since the last one."""

    rank: int
    state: str
    reports: list[Report] = field(default_factory=list)
    parts: list[CheckpointPart] = field(default_factory=list)
    step: int | None = None  # last step passed to step_end
    notice: str | None = None  # a termination notice seen by the group
    replies: list[Reply] = field(default_factory=list)  # answers to session commands
    waiting: bool = False  # idle until the next session command
    beats: int = 0  # heartbeats from work between steps (evaluation)
    ticks: int = 0  # progress raytf saw for itself (optimizer steps, phases ended)
    phases: tuple[Phase, ...] = ()  # the silent phases open at the poll
    error: BaseException | None = None
    result: Any = None
    ended_at: float | None = None  # wall time the user's function returned or raised
    shard_epochs: list[ShardEpoch] = field(default_factory=list)  # epochs the shards finished
    positions: dict = field(default_factory=dict)  # dataset -> (epoch, batches read)
    startup: dict | None = None  # phase -> wall time, once: the first poll after step one
    output: list[str] = field(default_factory=list)  # the process's output lines since the last
    total_steps: int | None = None  # the loop's own total, once it set one
    compat_notes: tuple[str, ...] = ()  # features that fell back (raytf.compat), once
    copy_cost: tuple[float, float] | None = None  # the emergency copy's cost, once measured
