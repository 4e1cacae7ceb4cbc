"""raytf's own knobs: every timing constant and default, each with its environment override.

One frozen ``Settings`` read from the environment when asked
(``Settings.from_env()``), never at import time: a process that sets a
variable after importing raytf (a test, a notebook) still gets it, and the
driver's collaborators take the values they need at construction, so tests
pass a ``Settings`` with intervals of 0 instead of patching modules.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from raytf.errors import ConfigError

# Environment each worker starts with unless the user's (or the node's) says otherwise.
WORKER_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "1",  # TF's C++ INFO lines drown the user's output
    "PYTHONUNBUFFERED": "1",  # so forwarded output keeps pace with training
}


def _env(name: str, kind: type, default, empty_is_value: bool = False):
    """A setting read from ``name``; set to "" it keeps ``default`` unless
    ``empty_is_value`` (a documented "" that means off)."""
    return field(default=default, metadata={"env": name, "kind": kind, "empty": empty_is_value})


@dataclass(frozen=True)
class Settings:
    """Every knob of raytf, each read from its ``RAYTF_*`` variable by ``from_env()``.

    Each field's docstring is its meaning in the site's reference (generated from
    this class: the variable, its type, its default and this text).
    """

    poll_interval_s: float = _env("RAYTF_POLL_INTERVAL_S", float, 0.2)
    """The driver polls every worker once per interval (each poll takes the worker's GIL,
    so keep them few)."""
    max_port_retries: int = _env("RAYTF_MAX_PORT_RETRIES", int, 3)
    """A port clash at start-up restarts the group on new ports this many times."""
    collateral_grace_s: float = _env("RAYTF_COLLATERAL_GRACE_S", float, 1.0)
    """After a broken collective, how long to wait for the poll naming its cause."""
    emergency_timeout_s: float = _env("RAYTF_EMERGENCY_TIMEOUT_S", float, 20.0)
    """How long the survivors of a dead worker may take to store an emergency checkpoint."""
    drain_check_interval_s: float = _env("RAYTF_DRAIN_CHECK_INTERVAL_S", float, 1.0)
    """How often the driver asks Ray for draining nodes."""
    grow_check_interval_s: float = _env("RAYTF_GROW_CHECK_INTERVAL_S", float, 2.0)
    """How often an elastic run looks for room to grow."""
    log_level: str | None = _env("RAYTF_LOG_LEVEL", str, None)
    """raytf's own log lines on the driver (``DEBUG`` shows state changes and timings);
    unset: ``LoggingConfig.log_level``."""
    embedded_node_ip: str = _env("RAYTF_EMBEDDED_NODE_IP", str, "127.0.0.2")
    """The loopback address an embedded Ray instance binds (Ray rewrites 127.0.0.1)."""
    storage_path: str = _env(
        "RAYTF_STORAGE_PATH", str, os.path.join(os.path.expanduser("~"), "raytf_results")
    )
    """Where runs go when ``RunConfig.storage_path`` is not given."""
    storage_shared: bool = _env("RAYTF_STORAGE_SHARED", bool, False)
    """1: a local storage path is a file system every node mounts (NFS, a cluster file
    system), allowed on a cluster whose autoscaler can add nodes
    (``raytf.group.shared_storage``)."""
    autoscaler_config: str | None = _env("RAYTF_AUTOSCALER_CONFIG", str, None)
    """The autoscaler's node types (a cluster YAML), when not on a head made by ``ray up``
    (which has ``~/ray_bootstrap_config.yaml``)."""
    local_state: str = _env(
        "RAYTF_LOCAL_STATE",
        str,
        os.path.join(os.path.expanduser("~"), ".raytf", "local_cluster.json"),
    )
    """``raytf local``'s state file: the simulated nodes' pids."""
    node_start_timeout_s: float = _env("RAYTF_NODE_START_TIMEOUT_S", float, 90.0)
    """How long one ``raytf local`` node may take to start."""
    tune_commit_wait_s: float = _env("RAYTF_TUNE_COMMIT_WAIT_S", float, 60.0)
    """A Tune trial's report at a checkpoint step waits at most this long for that step's
    commit, so the result Tune may stop the trial at carries it
    (``raytf.integrations.tune``)."""
    host_copy_dir: str = _env("RAYTF_HOST_COPY_DIR", str, "/dev/shm", empty_is_value=True)
    """Where each node keeps copies of the latest checkpoints in host memory, for restores
    that skip object storage (``raytf.checkpoint.host_copy``); "" turns them off."""
    host_copy_max_age_s: float = _env("RAYTF_HOST_COPY_MAX_AGE_S", float, 86400.0)
    """Other runs' host copies not written for this long (runs that never finished) are
    removed by the next run that starts on the node."""
    keep_processes: int = _env("RAYTF_KEEP_PROCESSES", int, 0)
    """Processes with TensorFlow imported kept on each node of a run after it ends, for
    the next run's warm start (``raytf.group.kept``); 0 keeps none."""
    standby_after_s: float = _env("RAYTF_STANDBY_AFTER_S", float, 30.0)
    """Standby workers (``FailureConfig.standby_workers``) start once an attempt has
    trained this long: each costs a TensorFlow import (5-7 s of a core) and ~0.7 GB."""
    keep_idle_s: float = _env("RAYTF_KEEP_IDLE_S", float, 600.0)
    """A kept process exits after this long without a run."""
    lease_heartbeat_s: float = _env("RAYTF_LEASE_HEARTBEAT_S", float, 5.0)
    """One driver per run directory (``raytf.rundir.lease``): the lease's heartbeat."""
    lease_stale_s: float = _env("RAYTF_LEASE_STALE_S", float, 30.0)
    """How long a lease's heartbeat must stay unchanged, watched on the new driver's own
    clock, before that driver takes it over (at once when the holder's process, on this
    host, is gone)."""
    progress_sample_s: float = _env("RAYTF_PROGRESS_SAMPLE_S", float, 1.0)
    """How often each worker reads its optimizers' step counters, the progress the
    driver's hang detection sees without any raytf call in the loop
    (``raytf.worker.liveness``); 0 reads none (a loop that reports, or calls
    ``step_end``, is still seen)."""
    storage_outage_s: float = _env("RAYTF_STORAGE_OUTAGE_S", float, 600.0)
    """The run directory unwritable this long (``state.json``, commits) stops the run with
    ``StorageUnavailableError``."""
    stop_checkpoint_wait_s: float = _env("RAYTF_STOP_CHECKPOINT_WAIT_S", float, 60.0)
    """On SIGTERM or SIGINT to the driver, how long it waits for the stop checkpoint's
    commit."""
    final_state_write_s: float = _env("RAYTF_FINAL_STATE_WRITE_S", float, 30.0)
    """How long the driver's last ``state.json`` write may take."""
    forward_credentials: bool = _env("RAYTF_FORWARD_CREDENTIALS", bool, False)
    """``RunConfig.forward_credentials`` where a run does not say: the driver's storage
    credentials copied into its workers (a job's flag, without a code change)."""
    ship_package: bool | None = _env("RAYTF_SHIP_PACKAGE", bool, None)
    """1: the driver's raytf package goes to its workers in their runtime_env's
    ``py_modules`` (``raytf.group.shipping``), unless the job's runtime_env brought it;
    0: the workers import the raytf installed on their nodes; unset: 1 where a worker
    may land on a node other than the driver's (another node alive, or an autoscaler)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The defaults, overridden by every variable set in ``environ`` (os.environ).

        A variable set to "" counts as unset (a shell's ``VAR= cmd``, a YAML ``VAR: ""``),
        except where "" is a value of its own: ``RAYTF_HOST_COPY_DIR=""`` turns host
        copies off."""
        env = os.environ if environ is None else environ
        values = {}
        for f in dataclasses.fields(cls):
            raw = env.get(f.metadata["env"])
            if raw is None or (raw == "" and not f.metadata["empty"]):
                continue
            values[f.name] = _parse(f.metadata["env"], f.metadata["kind"], raw)
        return cls(**values)


def _parse(name: str, kind: type, raw: str):
    """A variable's value; a number must be finite and >= 0 (a negative idle time would
    keep a process forever, a NaN interval compare false with every clock)."""
    if kind is str:
        return raw
    if kind is bool:
        if raw.lower() in ("1", "true", "yes"):
            return True
        if raw.lower() in ("0", "false", "no"):
            return False
        raise ConfigError(f"{name}={raw!r}: must be 1 or 0 (true or false)")
    what = "an integer" if kind is int else "a number"
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: must be {what}") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name}={raw!r}: must be {what} >= 0, finite")
    return value
