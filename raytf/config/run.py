"""How many workers, what each needs, where a run lives and what it logs
(``ScalingConfig``, ``RunConfig``, ``LoggingConfig``).

Names mirror Ray Train's (`ScalingConfig`, `RunConfig`) so its users can move over.
Every dataclass validates itself in ``__post_init__`` and names the bad field and
value: a mistake must surface before any process starts, never as a hang later.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass, field

from raytf.config.checks import (
    check_resources,
    finite_number,
    is_count,
)
from raytf.config.fault_tolerance import CheckpointConfig, FailureConfig
from raytf.errors import ConfigError
from raytf.rundir.paths import join_run_dir
from raytf.settings import Settings

PLACEMENT_STRATEGIES = ("SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class ScalingConfig:
    """How many workers and what each one holds.

    ``num_workers`` is a count, or ``(min, max)`` for an elastic group: it
    starts once ``min`` workers can be placed (after waiting up to
    ``elastic_wait_s`` for more), continues smaller at once when a node is lost
    (on the slots whose processes are warm), and grows back toward ``max`` when
    capacity returns. Every resize restarts the whole group from a
    committed checkpoint. ``global_batch_size``, when given, is what stays
    fixed across resizes: world sizes it does not split over are skipped.

    ``num_workers=0`` is local mode (Ray Train's name): the training function
    runs in the calling process with a one-device strategy and the same context
    API, for a plain debugger (``raytf.local_mode``).

    ``use_gpu`` gives every worker one GPU unless ``resources_per_worker`` asks
    for more (one worker per node holding all of its GPUs is the usual layout:
    MWMS then mirrors across that node's GPUs). ``placement_strategy`` is a Ray
    placement-group strategy; SPREAD puts workers on different nodes when the
    cluster has several and packs them when it has one.

    Raises:
        ConfigError: A field's value is invalid; the message names the field and the
            value, before anything starts.
    """

    num_workers: int | tuple[int, int] = 1
    """How many workers: a count, ``(min, max)`` for an elastic group, or 0 for
    local mode (the loop in this process, without Ray)."""
    use_gpu: bool = False
    """Give every worker one GPU (or what ``resources_per_worker`` asks for); NCCL
    collectives. Without it a worker sees no GPU."""
    resources_per_worker: dict[str, float] | None = None
    """One worker's Ray resources (``{"CPU": 8, "GPU": 2, "pool_gpu_spot": 1}``);
    default 1 CPU, plus 1 GPU with ``use_gpu``."""
    placement_strategy: str = "SPREAD"
    """Ray's placement-group strategy: SPREAD, PACK, STRICT_SPREAD or STRICT_PACK."""
    elastic_wait_s: float = 10.0
    """An elastic group: how long to wait for more than ``min`` workers at start, and
    for a lost node's replacement before continuing smaller."""
    global_batch_size: int | None = None
    """The global batch an elastic group keeps across resizes: world sizes it does
    not divide over are skipped. None: not fixed."""

    def __post_init__(self) -> None:
        n = self.num_workers
        if isinstance(n, (tuple, list)):
            if len(n) != 2 or not all(is_count(k) for k in n) or n[0] > n[1]:
                raise ConfigError(
                    f"ScalingConfig.num_workers = {n!r}: an elastic group is (min, max) "
                    "with integers 1 <= min <= max"
                )
            object.__setattr__(self, "num_workers", tuple(n) if n[0] < n[1] else n[0])
        elif not is_count(n) and not (n == 0 and not isinstance(n, bool)):
            raise ConfigError(
                f"ScalingConfig.num_workers = {n!r}: must be an integer >= 1, (min, max), "
                "or 0 for local mode (the loop runs in this process, without Ray)"
            )
        finite_number("ScalingConfig.elastic_wait_s", self.elastic_wait_s, low_ok=True)
        g = self.global_batch_size
        if g is not None and not is_count(g):
            raise ConfigError(
                f"ScalingConfig.global_batch_size = {g!r}: must be an integer >= 1, or None"
            )
        if not isinstance(self.use_gpu, bool):
            raise ConfigError(f"ScalingConfig.use_gpu = {self.use_gpu!r}: must be True or False")
        if self.placement_strategy not in PLACEMENT_STRATEGIES:
            raise ConfigError(
                f"ScalingConfig.placement_strategy = {self.placement_strategy!r}: "
                f"must be one of {', '.join(PLACEMENT_STRATEGIES)}"
            )
        if self.resources_per_worker is not None:
            res = check_resources("ScalingConfig.resources_per_worker", self.resources_per_worker)
            if self.use_gpu and res.get("GPU", 1) == 0:
                raise ConfigError(
                    "ScalingConfig.resources_per_worker['GPU'] = 0 with use_gpu=True: "
                    "ask for at least one GPU or set use_gpu=False"
                )
            if not self.use_gpu and res.get("GPU", 0) > 0:
                raise ConfigError(
                    f"ScalingConfig.resources_per_worker['GPU'] = {res['GPU']!r} with "
                    "use_gpu=False: set use_gpu=True so the worker uses the GPUs it holds"
                )
            object.__setattr__(self, "resources_per_worker", res)

    def worker_resources(self) -> dict[str, float]:
        """The resources of one worker's bundle, defaults filled in."""
        res = dict(self.resources_per_worker or {})
        res.setdefault("CPU", 1.0)
        if self.use_gpu:
            res.setdefault("GPU", 1.0)
        return {k: v for k, v in res.items() if v > 0}

    @property
    def gpus_per_worker(self) -> int:
        return int(self.worker_resources().get("GPU", 0))

    @property
    def is_local(self) -> bool:
        """``num_workers=0``: local mode (``raytf.local_mode``)."""
        return self.num_workers == 0

    @property
    def is_elastic(self) -> bool:
        return isinstance(self.num_workers, tuple)

    def require_fixed_size(self, who: str, why: str) -> None:
        """Refuse an elastic group (or local mode) where ``who`` needs one size of workers.

        Args:
            who: What needs the fixed size, for the message (``"a Session"``).
            why: Why it does, for the message.

        Raises:
            ConfigError: ``num_workers`` is 0 or a ``(min, max)`` range.
        """
        if self.is_local:
            raise ConfigError(
                f"ScalingConfig.num_workers = 0 (local mode): {who} needs worker processes; "
                "give num_workers >= 1"
            )
        if self.is_elastic:
            raise ConfigError(
                f"ScalingConfig.num_workers = {self.num_workers}: {who} {why}; "
                "give one number of workers"
            )

    @property
    def min_workers(self) -> int:
        return self.num_workers[0] if self.is_elastic else self.num_workers

    @property
    def max_workers(self) -> int:
        return self.num_workers[1] if self.is_elastic else self.num_workers

    @property
    def replicas_per_worker(self) -> int:
        """MWMS replicas one worker adds: one per GPU it holds, one on CPU."""
        return max(1, self.gpus_per_worker) if self.use_gpu else 1


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True)
class LoggingConfig:
    """What a run prints (Ray Train's name). Each rank's whole output, TensorFlow's
    start-up notes included, is kept in ``RUN_DIR/logs/`` whatever is set here.

    ``log_level``: raytf's logger on the driver and the Python root logger on each
    worker; None leaves both as the process set them. ``tf_log_level``:
    ``TF_CPP_MIN_LOG_LEVEL`` on the workers (0 all, 1 no INFO, 2 no WARNING, 3 no
    ERROR); None takes the driver's environment, else 1. raytf keeps
    TF's start-up notes off the screen at the same level, since TF prints them before
    it reads the variable; 0 shows them.

    Raises:
        ConfigError: A field's value is invalid; the message names the field and the
            value, before anything starts.
    """

    log_level: str | None = None
    """raytf's logger on the driver and the root logger on each worker (``"DEBUG"``,
    ``"INFO"``...); None leaves both as the process set them."""
    tf_log_level: int | None = None
    """``TF_CPP_MIN_LOG_LEVEL`` on the workers (0 all, 1 no INFO, 2 no WARNING, 3 no
    ERROR); None: the driver's, else 1."""

    def __post_init__(self) -> None:
        bad = not isinstance(self.log_level, str) or self.log_level.upper() not in _LOG_LEVELS
        if self.log_level is not None and bad:
            raise ConfigError(
                f"LoggingConfig.log_level = {self.log_level!r}: must be one of {_LOG_LEVELS}"
            )
        level = self.tf_log_level
        if level is not None and (isinstance(level, bool) or level not in (0, 1, 2, 3)):
            raise ConfigError(f"LoggingConfig.tf_log_level = {level!r}: must be 0, 1, 2, 3 or None")

    def worker_env(self) -> dict[str, str]:
        """The variables that carry this to each worker process."""
        env = {}
        if self.log_level is not None:
            env["RAYTF_WORKER_LOG_LEVEL"] = self.log_level.upper()
        if self.tf_log_level is not None:
            env["TF_CPP_MIN_LOG_LEVEL"] = str(self.tf_log_level)
        return env


@dataclass(frozen=True)
class RunConfig:
    """Where a run keeps its files and how the driver behaves while it runs.

    The run directory is ``storage_path/name``: running the same name again
    finds the same directory (later: the same checkpoints). ``callbacks`` are
    ``raytf.Callback`` objects called on the driver (``raytf.driver.callbacks``).
    ``logging_config`` sets what the driver and the workers print.
    ``start_fresh`` begins at step 0 under a name that has files: the earlier
    run's files are moved into ``RUN_DIR/previous/<UTC time>/``, never deleted
    (a model that does not fit a run's checkpoints is refused until then).
    ``forward_credentials`` gives the workers the driver's storage credentials
    (``AWS_SECRET_ACCESS_KEY``, ``GOOGLE_APPLICATION_CREDENTIALS``...); by default
    (``RAYTF_FORWARD_CREDENTIALS``, else no) they use their node's own (instance
    role, service account, ~/.aws), which refresh by themselves and stay off other
    runs' processes. Forwarded values are copies: a token that expires is not
    renewed in the workers.

    Raises:
        ConfigError: A field's value is invalid; the message names the field and the
            value, before anything starts.
    """

    name: str | None = None
    """The run's name, its directory under ``storage_path``; a launch with an earlier
    run's name resumes it. None: ``raytf_<date>_<time>_<6 hex digits>``, unique."""
    storage_path: str | None = None
    """Where run directories go: a local path, a shared mount, or an fsspec URL
    (``s3://``, ``gs://``). None: ``RAYTF_STORAGE_PATH``, else ``~/raytf_results``."""
    verbose: int = 1
    """What the driver prints: 0 errors only, 1 progress lines (default), 2 more."""
    progress_interval_s: float = 2.0
    """Seconds between progress lines when the output is not a terminal."""
    setup_timeout_s: float = 120.0
    """How long the workers may take to start and make the strategy."""
    placement_timeout_s: float = 120.0
    """How long to wait for the group to be placed; then the run fails with
    ``PlacementTimeoutError`` as its cause."""
    checkpoint_config: CheckpointConfig = field(default_factory=CheckpointConfig)
    """When to checkpoint and how many to keep."""
    failure_config: FailureConfig = field(default_factory=FailureConfig)
    """What a failure costs: retries, timeouts, emergency checkpoints."""
    callbacks: tuple = ()
    """``raytf.Callback`` objects called on the driver, in order, on a thread of
    their own."""
    logging_config: LoggingConfig = field(default_factory=LoggingConfig)
    """What the driver and the workers print."""
    start_fresh: bool = False
    """Start at step 0 under a name that has files, moving them into
    ``RUN_DIR/previous/<UTC time>/``."""
    forward_credentials: bool | None = None
    """Copy the driver's storage credentials into the workers; None:
    ``RAYTF_FORWARD_CREDENTIALS``, else no (the nodes' own are used)."""

    def __post_init__(self) -> None:
        if not isinstance(self.logging_config, LoggingConfig):
            raise ConfigError(
                f"RunConfig.logging_config = {self.logging_config!r}: must be a LoggingConfig"
            )
        if not isinstance(self.callbacks, (list, tuple)):
            raise ConfigError(f"RunConfig.callbacks = {self.callbacks!r}: must be a list")
        for cb in self.callbacks:
            if not hasattr(cb, "on_report"):
                raise ConfigError(
                    f"RunConfig.callbacks: {cb!r} is not a raytf.Callback (subclass it and "
                    "override on_report, on_checkpoint, on_failure, on_restart, on_state or "
                    "on_run_end)"
                )
        object.__setattr__(self, "callbacks", tuple(self.callbacks))
        if self.name is None:
            # Unique per launch: two runs started in one second never share a directory.
            stamp = time.strftime("raytf_%Y%m%d_%H%M%S")
            object.__setattr__(self, "name", f"{stamp}_{secrets.token_hex(3)}")
        elif not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ConfigError(
                f"RunConfig.name = {self.name!r}: use letters, digits, '_', '.' and '-' "
                "(it becomes a directory name)"
            )
        if self.storage_path is None:
            object.__setattr__(self, "storage_path", Settings.from_env().storage_path)
        if self.forward_credentials is None:
            object.__setattr__(self, "forward_credentials", Settings.from_env().forward_credentials)
        for fname in ("start_fresh", "forward_credentials"):
            if not isinstance(getattr(self, fname), bool):
                raise ConfigError(f"RunConfig.{fname} = {getattr(self, fname)!r}: must be a bool")
        if self.verbose not in (0, 1, 2):
            raise ConfigError(f"RunConfig.verbose = {self.verbose!r}: must be 0, 1 or 2")
        for fname in ("progress_interval_s", "setup_timeout_s", "placement_timeout_s"):
            finite_number(f"RunConfig.{fname}", getattr(self, fname))
        if not isinstance(self.checkpoint_config, CheckpointConfig):
            raise ConfigError(
                f"RunConfig.checkpoint_config = {self.checkpoint_config!r}: "
                "must be a CheckpointConfig"
            )
        if not isinstance(self.failure_config, FailureConfig):
            raise ConfigError(
                f"RunConfig.failure_config = {self.failure_config!r}: must be a FailureConfig"
            )

    @property
    def run_dir(self) -> str:
        """``storage_path/name``: a URL stays a URL (s3://, gs://...), a local path is made
        absolute (the workers may not share the driver's working directory)."""
        return join_run_dir(self.storage_path, self.name)
