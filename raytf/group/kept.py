"""Processes kept between runs, with TensorFlow imported: the next run's warm start.

A run's workers pay process start and a 5-7 s TensorFlow import before MWMS
exists. Kept processes pay it ahead: zero-resource, detached Ray actors, one
or more per node, each importing TensorFlow as it starts. A run that finds
one on a slot's node claims it and promotes it into the slot exactly like a
standby (``WorkerPool``): the slot's placement-group bundle holds the
resources, and the bundle's GPUs are handed over before TensorFlow touches
CUDA (at MWMS creation). A claim succeeds once per process, and a claimed
process ends with its run: no run is ever handed a process whose TensorFlow
state another run touched. An unclaimed one exits by itself after its idle
timeout.

Scoped: kept processes live in a namespace of their owner's (``RAYTF_KEEP_SCOPE``,
else the OS user of the process that starts or claims them), and a run lists and
claims only its own scope's, so one team's run never gets another's process.
They are started without credentials (``raytf.group.actors.worker_env``), and a
claim puts back every variable their starter set before applying the run's
(``raytf.worker.process.environment``). A Ray cluster is one trust domain: any job on
it can run code on any node, so the scope keeps runs apart, not users who mean
harm; those need clusters of their own (README, "Shared clusters").

Opt-in, two ways: ``raytf pool start --per-node N --idle-s S`` (and ``raytf
pool stop``), or ``RAYTF_KEEP_PROCESSES=N`` (``RAYTF_KEEP_IDLE_S``), with which
each run leaves N fresh ones on each of its nodes when it ends. They are
matched to runs by environment (Python, raytf, the runtime_env the process runs
with, the job's with the driver's shipped raytf package (``raytf.group.shipping``)
where one is, and every variable read when the process starts or TensorFlow is
imported, such as ``TF_USE_LEGACY_KERAS``), so a job with other code or settings never gets a
process that cannot load it or imported TensorFlow otherwise. Cost: each is
an idle Python process with TensorFlow imported (``raytf pool list`` shows
its peak resident memory: 713 MB on CPU here; with eight of them and the
cluster running, this machine's used memory read 3 GiB, shared library pages
counted once).

A Tune trial's actor may be ended before its run's end replenishes the pool,
so for a search start enough ahead: ``--per-node`` = trials x workers per node.
"""

from __future__ import annotations

import getpass
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import sys
import uuid

import ray
from ray.exceptions import GetTimeoutError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raytf.compat import DISTRIBUTION
from raytf.group.actors import import_time_env, kill_actor, without_credentials, worker_env
from raytf.group.cluster import alive_node_ids
from raytf.group.shipping import effective_env, job_runtime_env
from raytf.worker.actor import RaytfWorker

logger = logging.getLogger("raytf")

NAMESPACE = "raytf_kept"  # a scope's namespace is NAMESPACE-<scope>
PREFIX = "raytf-kept-"
CLAIM_TIMEOUT_S = 2.0
_told: set[str] = set()  # environments told that their scope keeps none for them


def namespace() -> str:
    """This process's scope's namespace: ``RAYTF_KEEP_SCOPE``, else its OS user's."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        user = f"uid{os.getuid()}"
    scope = os.environ.get("RAYTF_KEEP_SCOPE") or user
    return f"{NAMESPACE}-{re.sub(r'[^A-Za-z0-9_.-]', '_', scope)}"


def env_key(env: dict[str, str] | None = None, runtime_env: dict | None = None) -> str:
    """What a kept process must share with a run to serve it; ``env``: the variables the
    run's workers get (default: the driver's, ``worker_env``); ``runtime_env``: their
    actors' runtime_env option (``raytf.group.shipping``), None for the job's as it is.
    A shipped package's URI is the hash of its content: other raytf code, another key."""
    runtime_env = effective_env(job_runtime_env(), runtime_env)
    # What loads code (working_dir, py_modules, pip, conda, container...) must match, the
    # job's own variables (Ray sets them in the process itself: a claim cannot take them
    # back, so a job with others, credentials among them, never gets it), and the
    # driver's variables read at the process's start or TF's import (the others the
    # claim replaces).
    variables = import_time_env(worker_env() if env is None else env)
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = "source"
    doc = {"python": sys.version, "raytf": version, "runtime_env": runtime_env, "env": variables}
    return hashlib.sha1(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:10]


def _names(key: str | None = None, node_id: str | None = None) -> list[str]:
    prefix = PREFIX if key is None else f"{PREFIX}{key}-"
    if node_id is not None:
        prefix += f"{node_id[:16]}-"
    mine = ray.util.list_named_actors(all_namespaces=True)
    mine = [a["name"] for a in mine if a["namespace"] == namespace()]
    return sorted(name for name in mine if name.startswith(prefix))


def start(
    per_node: int,
    idle_s: float,
    node_ids: list[str] | None = None,
    env: dict | None = None,
    runtime_env: dict | None = None,
) -> int:
    """Top each node (default: every alive node) up to ``per_node`` kept processes;
    ``env``: the variables a run's workers get, less any credential (it would wait in an
    unclaimed process until a run replaced it); ``runtime_env``: their actors' option
    (``raytf.group.shipping.worker_runtime_env``), None for the job's as it is."""
    env = without_credentials(worker_env() if env is None else env)
    key, started = env_key(env, runtime_env), 0
    option = {} if runtime_env is None else {"runtime_env": runtime_env}
    actor_cls = ray.remote(RaytfWorker)
    for node in node_ids or sorted(alive_node_ids()):
        for _ in range(per_node - len(_names(key, node))):
            actor_cls.options(
                name=f"{PREFIX}{key}-{node[:16]}-{uuid.uuid4().hex[:8]}",
                namespace=namespace(),
                lifetime="detached",
                num_cpus=0,
                num_gpus=0,
                max_restarts=0,
                max_concurrency=3,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                **option,
            ).remote(None, 1, False, 0, env, idle_s=idle_s)
            started += 1
    return started


def any_kept(key: str) -> bool:
    """Cheap first check (one GCS call): is any process kept for this environment
    (``key``: its ``env_key``)? Where the scope keeps some for other environments only,
    the run says so (a pool started from a shell with other settings would otherwise
    just never serve)."""
    ours = _names()
    mine = [name for name in ours if name.startswith(f"{PREFIX}{key}-")]
    if ours and not mine and key not in _told:
        _told.add(key)  # once a process, not at every restart
        logger.warning(
            "raytf: %d kept process(es) in %s, none for this run's environment (code, job "
            "variables, or variables read at TensorFlow's import such as TF_USE_LEGACY_KERAS "
            "and TF_CPP_MIN_LOG_LEVEL differ from their starter's): starting new ones",
            len(ours),
            namespace(),
        )
    return bool(mine)


def claim(node_id: str, key: str):
    """A kept process on ``node_id`` for this run's environment (``key``: its
    ``env_key``), now this run's; else None."""
    for name in _names(key, node_id):
        try:
            actor = ray.get_actor(name, namespace=namespace())
        except ValueError:
            continue  # exited since the listing
        try:
            if ray.get(actor.claim.remote(), timeout=CLAIM_TIMEOUT_S):
                return actor
        except GetTimeoutError:
            kill_actor(actor)  # it may have said yes too late: nobody would ever end it
        except Exception as exc:  # noqa: BLE001 - died meanwhile: try the next one
            logger.debug("kept process %s not claimed: %s", name, exc)
    return None


def listing() -> list[dict]:
    """This scope's kept processes: name, node, pid and resident memory (``raytf pool list``)."""
    out = []
    for name in _names():
        try:
            actor = ray.get_actor(name, namespace=namespace())
            out.append({"name": name, **ray.get(actor.describe.remote(), timeout=CLAIM_TIMEOUT_S)})
        except Exception:  # noqa: BLE001 - exited between the listing and the call
            continue
    return out


def stop() -> int:
    """Kill this scope's kept processes (any environment); how many were asked to go."""
    names = _names()
    for name in names:
        try:
            kill_actor(ray.get_actor(name, namespace=namespace()))
        except ValueError:
            continue  # exited on its own meanwhile
    return len(names)
