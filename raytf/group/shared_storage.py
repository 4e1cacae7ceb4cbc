"""Is a local run directory the same storage on every node that holds a worker?

The chief writes checkpoint files on its node while the driver commits them from
its own: a local path that is not one shared file system on every node makes
every restart begin from step 0. So raytf checks it where it matters: at launch
on the nodes alive then (``unshared_nodes``), and at every attempt on the nodes
the workers were placed on (``SharedStorageCheck``): nodes started after the
launch, or brought by an autoscaler. A cluster whose autoscaler can add machines
it never had (a cloud's, KubeRay's; not Ray's ``local`` provider, whose machines
are listed) is refused a local path up front unless the user names it shared
(``RAYTF_STORAGE_SHARED=1``, a mount every node has at that path): each new
machine would be a new chance to write to a disk of its own.
"""

from __future__ import annotations

import logging
import os
import uuid

import ray

from raytf.errors import ConfigError, WorkerSetupError
from raytf.group.cluster import alive_nodes

logger = logging.getLogger("raytf")


def not_shared_error(storage_path: str, problems: list[str]) -> ConfigError:
    return ConfigError(
        f"RunConfig.storage_path = {storage_path!r} is a local path, and not the same "
        "storage on every node: the chief writes checkpoint files on its node while the "
        "driver commits them from this one, so every restart would begin from step 0. "
        + "; ".join(problems)
        + ". Use a shared mount (NFS, a cluster filesystem) at the same path on every node, "
        "or an object store (s3://bucket/path, gs://...)"
    )


def autoscaled_error(storage_path: str) -> ConfigError:
    return ConfigError(
        f"RunConfig.storage_path = {storage_path!r} is a local path on a cluster whose "
        "autoscaler can add nodes: a node added later would keep its checkpoints on its own "
        "disk. Use an object store (s3://bucket/path, gs://bucket/path; the nodes reach it "
        "with their own credentials), or a file system every node mounts at that path, "
        "named as such with RAYTF_STORAGE_SHARED=1"
    )


def _probe():
    """The task each node runs: can it read the driver's probe, and write one back? Made
    here, so that Ray sends the function itself (a nested function travels by value):
    a node without raytf installed (the case shipping exists for) runs it as well."""

    def probe_on_node(path: str, content: bytes, reply: str) -> tuple[str, str | None]:
        import socket

        try:
            with open(path, "rb") as f:
                seen = f.read()
            if seen != content:
                return socket.gethostname(), f"{path} holds other bytes there"
            with open(reply, "wb") as f:
                f.write(content)
            return socket.gethostname(), None
        except OSError as exc:
            return socket.gethostname(), f"{type(exc).__name__}: {exc}"

    return probe_on_node


def unshared_on(
    directory: str, nodes: list[dict], timeout_s: float = 60.0
) -> tuple[list[str], list[str]]:
    """A line per node of ``nodes`` (Ray's node records) that does not see ``directory``
    as the driver does, and a line per node where the check could not run (a node that
    died, one still installing the job's environment): the driver writes a probe file
    there; a zero-CPU task on each node reads it and writes its own, which the driver
    reads back. Only the first is an answer: the second proves nothing."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not nodes:
        return [], []
    os.makedirs(directory, exist_ok=True)
    token = uuid.uuid4().hex
    probe = os.path.join(directory, f".raytf-shared-{token}")
    content = token.encode()
    with open(probe, "wb") as f:
        f.write(content)
    task = ray.remote(num_cpus=0, max_retries=0)(_probe())
    refs, replies = {}, {}
    for n in nodes:
        replies[n["NodeID"]] = f"{probe}.{n['NodeID'][:12]}"
        strategy = NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        refs[n["NodeID"]] = task.options(scheduling_strategy=strategy).remote(
            probe, content, replies[n["NodeID"]]
        )
    bad, unanswered = [], []
    try:
        for n in nodes:
            where = f"node {n['NodeManagerAddress']} ({n['NodeID'][:12]})"
            try:
                host, problem = ray.get(refs[n["NodeID"]], timeout=timeout_s)
            except Exception as exc:  # noqa: BLE001 - no answer: neither shared nor not
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                unanswered.append(f"{where}: {type(exc).__name__}: {first}")
                continue
            if problem is None and not os.path.exists(replies[n["NodeID"]]):
                problem = "its file written there is not seen here"
            if problem is not None:
                bad.append(f"{where}, host {host}: {problem}")
    finally:
        for path in [probe, *replies.values()]:
            try:
                os.remove(path)
            except OSError:
                pass
    return bad, unanswered


def unshared_nodes(directory: str, bundle: dict[str, float], timeout_s: float = 60.0) -> list[str]:
    """At launch: the alive nodes that could host a worker and do not see ``directory``.
    One node (or none able to hold a worker besides this one) needs no check."""
    alive = alive_nodes()
    nodes = [
        n for n in alive if all(n["Resources"].get(k, 0.0) >= v for k, v in bundle.items() if v > 0)
    ]
    if len(alive) < 2:
        return []
    bad, unanswered = unshared_on(directory, nodes, timeout_s)
    if unanswered:  # checked again where a worker lands (SharedStorageCheck)
        logger.warning("the shared-storage check did not run on %s", "; ".join(unanswered))
    return bad


class SharedStorageCheck:
    """At every attempt: the nodes the workers were placed on, each checked once.

    The driver's own node needs no probe (it wrote the file). Raises the
    ``ConfigError`` a launch would have raised, so the run stops before a worker
    writes anything where the driver cannot see it; a node where the check could
    not run costs the attempt (``WorkerSetupError``, retried) and is asked again."""

    def __init__(self, directory: str, storage_path: str):
        self.directory = directory
        self.storage_path = storage_path
        self.checked: set[str] = {ray.get_runtime_context().get_node_id()}

    def __call__(self, node_ids: set[str]) -> None:
        new = set(node_ids) - self.checked
        if not new:
            return
        nodes = [n for n in alive_nodes() if n["NodeID"] in new]
        problems, unanswered = unshared_on(self.directory, nodes)
        if problems:
            raise not_shared_error(self.storage_path, problems)
        if unanswered:
            raise WorkerSetupError(
                "the check that the run directory is the same storage on every worker's "
                f"node did not run on {'; '.join(unanswered)}: the next attempt asks again"
            )
        self.checked |= new
