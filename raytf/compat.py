"""The dependency versions raytf was checked against, and a probe of each private API it uses.

raytf works around gaps in TensorFlow, Keras and Ray through a few of their
internals. ``pyproject.toml`` pins the versions each was read and run against
(``SUPPORTED``), but a cluster image can hold others. So a worker probes every
internal once, when it starts (after MWMS exists: the probes read attributes,
they run no op), and never changes behaviour silently:

- where a plain path exists, the worker takes it and the driver prints why,
  once per run: synchronous saves instead of the asynchronous snapshot, Keras's
  ``model.fit`` left unpatched, no tf.data iterator reaper, no actor-name prefix;
- where none does (on-demand checkpoints need TF's coordination-service store),
  the run stops with ``DependencyError`` naming the package, the version
  installed and the one supported.

A probe answers None when the internal is there as raytf uses it, else why not.
``tests/unit/test_compat.py`` runs them on the installed packages and fakes a
mismatch of each.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass

from raytf.errors import DependencyError

# The distribution's name (pip's); the import name is raytf. PyPI's project named
# "raytf" (0.0.1, 2021) is another one: no command of ours installs that name.
DISTRIBUTION = "raytf-mwms"

# Package -> the major.minor release raytf's workarounds were checked against.
SUPPORTED = {"tensorflow": "2.21", "keras": "3.15", "ray": "2.60"}


def installed(package: str) -> str:
    """The version of an installed package, as the package itself reports it."""
    import importlib

    return str(getattr(importlib.import_module(package), "__version__", "unknown"))


def source_digest(root: str | None = None) -> str:
    """A digest of raytf's own Python sources (``root``: a raytf package directory; by
    default the one this process imported). The driver and every worker compare theirs
    at set-up: ``__version__`` is a constant, and two builds of one version (a node's
    install, an older ship) speak different messages."""
    if root is None:
        return _own_digest()
    paths = sorted(
        os.path.join(folder, name)
        for folder, _, names in os.walk(root)
        for name in names
        if name.endswith(".py")
    )
    h = hashlib.sha256()
    for path in paths:
        h.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read() + b"\0")
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def _own_digest() -> str:
    return source_digest(os.path.dirname(os.path.abspath(__file__)))  # raytf/, this file's


def other_build(digests: list[str | None], where: list[str]) -> DependencyError | None:
    """The ranks whose raytf is not the driver's (``digests``: each rank's
    ``source_digest``; None: a build too old to say), or None."""
    mine = _own_digest()
    other = [rank for rank, digest in enumerate(digests) if digest != mine]
    if not other:
        return None
    shown = ", ".join(f"rank {r} on {where[r]}: {digests[r] or 'an older build'}" for r in other)
    return DependencyError(
        f"the workers' raytf is not the driver's (driver's sources {mine}; {shown}): the "
        "two would speak different messages. Let the driver ship its package "
        "(RAYTF_SHIP_PACKAGE, the default on clusters of several nodes) or install the "
        "same raytf on every node"
    )


def version_note(package: str, version: str | None = None) -> str | None:
    """None when ``version`` (default: the installed one) is the supported release."""
    version = installed(package) if version is None else version
    if ".".join(version.split(".")[:2]) == SUPPORTED[package]:
        return None
    return f"{package} {version} is installed, raytf supports {SUPPORTED[package]}.*"


@dataclass(frozen=True)
class Probe:
    """One private-API use: what it gives, the package it is in, and the plain path."""

    feature: str
    package: str
    check: Callable[[], str | None]
    fallback: str | None  # what the worker does instead; None: the run cannot go on
    # True where raytf relies on an internal's layout or behaviour (the snapshot, the fit
    # patch): another release falls back. False where the use is by name only and the
    # check looks for each name: another release with the names there changes nothing.
    version_bound: bool = True

    def run(self) -> str | None:
        """None when the internal is usable; else why not (a failing check is a 'no')."""
        try:
            why = (version_note(self.package) if self.version_bound else None) or self.check()
        except Exception as exc:  # noqa: BLE001 - a probe that cannot even look says no
            why = f"{type(exc).__name__}: {exc}"
        return why


def _snapshot_internals() -> str | None:
    from tensorflow.python.checkpoint import functional_saver
    from tensorflow.python.checkpoint.checkpoint import TrackableSaver
    from tensorflow.python.training.saving import saveable_object

    gather = getattr(TrackableSaver, "_gather_serialized_tensors", None)
    if gather is None:
        return "TrackableSaver._gather_serialized_tensors is gone"
    if list(inspect.signature(gather).parameters) != ["self", "object_graph_tensor"]:
        return f"TrackableSaver._gather_serialized_tensors{inspect.signature(gather)} changed"
    if not hasattr(functional_saver, "MultiDeviceSaver"):
        return "functional_saver.MultiDeviceSaver is gone"
    if not hasattr(saveable_object, "SaveSpec"):
        return "saveable_object.SaveSpec is gone"
    return None


def _coordination_store() -> str | None:
    from tensorflow.python.eager import context

    missing = [
        name
        for name in ("set_config_key_value", "get_config_key_value")
        if not callable(getattr(context.context(), name, None))
    ]
    return f"eager context lacks {', '.join(missing)}" if missing else None


def _iterator_handles() -> str | None:
    from tensorflow.python.data.ops import iterator_ops, multi_device_iterator_ops

    for cls, attr in (
        (iterator_ops.OwnedIterator, "_iterator_resource"),
        (multi_device_iterator_ops.OwnedMultiDeviceIterator, "_multi_device_iterator_resource"),
    ):
        if attr not in inspect.getsource(cls.__init__) + inspect.getsource(cls):
            return f"{cls.__name__} no longer keeps {attr}"
    return None


def _ray_log_prefixes() -> str | None:
    from ray._private import ray_constants

    names = ("LOG_PREFIX_ACTOR_NAME", "LOG_PREFIX_TASK_NAME", "LOG_PREFIX_JOB_ID")
    missing = [n for n in names if not isinstance(getattr(ray_constants, n, None), str)]
    return f"ray._private.ray_constants lacks {', '.join(missing)}" if missing else None


SNAPSHOT = Probe(
    "asynchronous and emergency checkpoints (TF's saver internals)",
    "tensorflow",
    _snapshot_internals,
    "checkpoints are written synchronously, and no emergency checkpoint is taken",
)
COORDINATION = Probe(
    "on-demand checkpoints (TF's coordination-service key-value store)",
    "tensorflow",
    _coordination_store,
    None,
    version_bound=False,
)
ITERATOR_REAPER = Probe(
    "freeing tf.data iterators off the training thread",
    "tensorflow",
    _iterator_handles,
    "iterators are freed where TF frees them (a run's end may wait for its input pipeline)",
    version_bound=False,
)
RAY_LOG_PREFIX = Probe(
    "worker lines named by rank in Ray's log stream",
    "ray",
    _ray_log_prefixes,
    "worker output keeps Ray's default prefixes",
    version_bound=False,
)
# Keras's fit patch has its probe beside it: ``raytf.worker.fit.mwms.PROBE``.
PROBES = (SNAPSHOT, COORDINATION, ITERATOR_REAPER, RAY_LOG_PREFIX)


@dataclass(frozen=True)
class ProbeReport:
    """The worker's answer: which features fell back, and what to print on the driver."""

    failed: frozenset[str]  # features of the probes that said no
    notes: tuple[str, ...]  # one line each, for the driver's screen
    versions: tuple[tuple[str, str], ...] = ()  # (package, version) of each probed package

    def ok(self, probe: Probe) -> bool:
        return probe.feature not in self.failed


def run_probes(probes: tuple[Probe, ...] = PROBES) -> ProbeReport:
    """Probe each internal once; raise ``DependencyError`` for one without a plain path."""
    failed, notes = set(), []
    for probe in probes:
        why = probe.run()
        if why is None:
            continue
        if probe.fallback is None:
            raise DependencyError(
                f"{probe.package} {installed(probe.package)} is installed, raytf supports "
                f"{SUPPORTED[probe.package]}.*: {probe.feature} cannot work ({why}). Install "
                f"{probe.package}=={SUPPORTED[probe.package]}.* on the cluster's nodes"
            )
        failed.add(probe.feature)
        notes.append(f"{probe.feature}: {why}; {probe.fallback}")
    versions = tuple((p, installed(p)) for p in sorted({probe.package for probe in probes}))
    return ProbeReport(frozenset(failed), tuple(notes), versions)


def disagreement(reports: list[ProbeReport], where: list[str]) -> DependencyError | None:
    """The error to stop a group with when its ranks' probes took different paths, or
    None. Ranks that fall back differently (one saves asynchronously, one not; one
    patches Keras's fit, one not) would run different collectives and hang, so a
    group runs only when every rank made rank 0's decisions. ``where``: each rank's
    node, for the message."""
    if all(r.failed == reports[0].failed for r in reports):
        return None
    lines = [
        f"rank {rank} on {node}: "
        + ", ".join(f"{p} {v}" for p, v in report.versions)
        + f" (falls back: {', '.join(sorted(report.failed)) or 'nothing'})"
        for rank, (report, node) in enumerate(zip(reports, where))
    ]
    return DependencyError(
        "the workers' nodes hold different versions, and raytf would take different paths "
        "on them: " + "; ".join(lines) + f". Install {_pins()} on every node"
    )


def _pins() -> str:
    return ", ".join(f"{package}=={release}.*" for package, release in SUPPORTED.items())
