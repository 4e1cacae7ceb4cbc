"""raytf's own code, shipped by the driver to its workers in Ray's ``runtime_env``.

Why: the nodes of a cluster need neither a package index (PyPI's project named
``raytf`` is someone else's) nor an image with raytf in it, and the workers run
the driver's raytf, not whatever a node happens to hold: a driver and workers of
two raytf versions would read each other's messages and checkpoints differently.

How: the package directory the driver imported goes into the worker actors'
``runtime_env["py_modules"]`` as a ``gcs://`` URI named by the hash of its
content. Ray uploads it once per content (a launch of unchanged code finds it
there) and each node unpacks it once; a worker puts it on its ``PYTHONPATH``,
ahead of any raytf installed on the node. Ray replaces a parent's
``py_modules`` with an actor's instead of merging the two lists, so the job's own
entries come first in the actor's list; the job's other fields (``working_dir``,
``pip``, ``env_vars``...) the actors inherit as they are. Kept processes
(``raytf.group.kept``) get the same option and are matched by it, so a process
kept with other raytf code never serves a run.

What it costs, measured on the 2-core machine beside other work (``raytf local``
cluster of 2 nodes, 2 workers, a loop that returns at once, medians of 3):
hashing the package and finding it uploaded 0.04 s, uploading a new content
0.03 s, once; but a worker in a runtime environment of its own starts in a
process Ray sets up for it instead of one it started ahead: a bare actor's start
1.69 s instead of 1.11 s (medians of 5), the launch 14.4 s instead of 12.4 s.
Hence the default: shipped only where a worker may land on a node other than
the driver's (``workers_may_land_elsewhere``); an embedded instance or a
one-node cluster pays nothing. ``RAYTF_SHIP_PACKAGE=1`` ships always, ``0``
never (a node image whose raytf must win).

Not shipped where the driver's raytf itself came from the job's runtime
environment (``--working-dir`` holding ``raytf/``, or ``py_modules``): the
workers inherit that copy. Where a driver runs as a plain script from a
directory holding ``raytf/`` (a checkout's root), Ray puts that directory first
on every worker's ``sys.path``: a node that has the same path imports from it.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import ray

from raytf.group.autoscaler import autoscaler_running
from raytf.group.cluster import alive_node_ids
from raytf.settings import Settings

logger = logging.getLogger("raytf")

# Ray unpacks a job's working_dir and py_modules under <session>/runtime_resources
# (ray_constants.DEFAULT_RUNTIME_ENV_DIR_NAME).
RESOURCES_DIR = "runtime_resources"
# Bytecode is rebuilt on each node; its files would only make every content hash new.
EXCLUDES = ["__pycache__", "*.pyc"]
_warned: set[str] = set()
# A job run in a container image: Ray takes no py_modules beside these.
CONTAINER_KEYS = ("image_uri", "container")


def package_dir() -> str:
    """The directory of the raytf package this process imported (this module's)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def delivered_by_ray(pkg_dir: str) -> bool:
    """Whether Ray unpacked ``pkg_dir`` from the job's runtime environment (a
    working_dir or py_modules entry): the workers inherit that environment."""
    return RESOURCES_DIR in Path(pkg_dir).parts


def with_package(job_env: Mapping, uri: str) -> dict:
    """An actor's ``runtime_env`` option: the job's py_modules, then raytf's."""
    modules = [m for m in (job_env.get("py_modules") or []) if m != uri]
    return {"py_modules": [*modules, uri]}


def effective_env(job_env: Mapping, option: Mapping | None) -> dict:
    """What an actor created with ``option`` runs with: Ray updates the job's
    environment with the actor's, field by field (``env_vars`` aside, unused here)."""
    return {**job_env, **(option or {})}


def job_runtime_env() -> dict:
    """The runtime environment of the job this driver belongs to (URIs, not paths)."""
    if not ray.is_initialized():  # asking the runtime context would start Ray
        return {}
    try:
        return dict(ray.get_runtime_context().runtime_env)
    except Exception:  # noqa: BLE001 - not connected: no job environment
        return {}


def upload(pkg_dir: str) -> str:
    """The ``gcs://`` URI of ``pkg_dir``'s content, uploaded unless Ray has it already
    (Ray's own step for a job's py_modules; it pins the URI until actors use it)."""
    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed

    env = upload_py_modules_if_needed(
        {"py_modules": [pkg_dir], "excludes": list(EXCLUDES)},
        include_gitignore=True,
        scratch_dir=tempfile.gettempdir(),
        logger=logger,
    )
    return env["py_modules"][0]


def workers_may_land_elsewhere() -> bool:
    """Another node is alive, or an autoscaler may add one. A process on the driver's
    own node reads the driver's raytf already, and shipping costs each worker's start
    there too. Each attempt asks again: a node that joined since gets the package."""
    try:
        own = ray.get_runtime_context().get_node_id()
        return bool(alive_node_ids() - {own}) or autoscaler_running()
    except Exception:  # noqa: BLE001 - no answer from Ray: ship rather than guess
        return True


def worker_runtime_env(settings: Settings | None = None) -> dict | None:
    """The ``runtime_env`` option of raytf's worker actors: raytf added to the job's
    py_modules, or None where the workers are to inherit the job's as it is."""
    settings = settings or Settings.from_env()
    pkg = package_dir()
    if delivered_by_ray(pkg):
        return None
    if any(k in job_runtime_env() for k in CONTAINER_KEYS) and settings.ship_package is None:
        return None  # Ray allows no py_modules beside a container image: the image's raytf
    ship = settings.ship_package
    if ship is None:  # unset: where a worker may land on a node other than the driver's
        ship = workers_may_land_elsewhere()
    if not ship:
        return None
    try:
        t0 = time.monotonic()
        uri = upload(pkg)
        logger.debug(
            "raytf: %s ships to the workers as %s (%.2f s)", pkg, uri, time.monotonic() - t0
        )
        return with_package(job_runtime_env(), uri)
    except Exception as exc:  # noqa: BLE001 - Ray Client, GCS refusing the upload...
        if pkg not in _warned:  # once a process, not at every attempt
            _warned.add(pkg)
            logger.warning(
                "raytf: could not ship %s to the workers (%s): they import the raytf "
                "installed on their nodes (RAYTF_SHIP_PACKAGE=0 skips the attempt)",
                pkg,
                exc,
            )
        return None
