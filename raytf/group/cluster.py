"""The Ray cluster as the driver sees it: joined (or started), its live nodes, its drains.

Every question the driver asks Ray about nodes goes through here, so one
reading of ``ray.nodes()`` serves the feasibility check, the pool and the
slots alike.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from concurrent.futures import ThreadPoolExecutor

import ray

from raytf.settings import Settings

logger = logging.getLogger("raytf")


def ensure_ray(min_cpus: int | None = None, settings: Settings | None = None) -> None:
    """Join the cluster named by RAY_ADDRESS, or the one ``ray start`` made on this
    machine (``ray submit``, ``ray exec``), or start an embedded local instance.

    Code that already called ``ray.init`` (with any address) is left as it is,
    so the same job runs unchanged locally and under ``ray job submit``. An
    embedded instance gets at least ``min_cpus`` logical CPUs (a job that
    feeds its workers from Ray Data needs CPUs beyond theirs).

    Args:
        min_cpus: logical CPUs an embedded instance gets at least (default: the
            machine's); ignored when joining a cluster.
        settings: raytf's settings (default: read from the ``RAYTF_*`` variables).
    """
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=True)
        return
    if _started_here() is not None:
        # A node of a cluster (``ray submit`` and ``ray exec`` run the job on the head,
        # with no RAY_ADDRESS): join the cluster ``ray start`` recorded on this machine.
        # Ray refuses ``num_cpus`` when ``ray.init`` finds that cluster itself.
        ray.init(address="auto", log_to_driver=True)
        return
    settings = settings or Settings.from_env()
    # An embedded instance is one machine: keep it on loopback. Ray rewrites 127.0.0.1
    # to the host's network address, so use another loopback address where Linux has one.
    node_ip = settings.embedded_node_ip if sys.platform.startswith("linux") else None
    cpus = max(os.cpu_count() or 1, min_cpus or 0)
    # Ray warns at every start of an instance that token authentication is on: for one
    # raytf starts on loopback for this process only, that is how it should be.
    token_note = logging.getLogger("ray._private.authentication.authentication_token_setup")
    quiet = _DropTokenNote()
    token_note.addFilter(quiet)
    try:
        ray.init(
            include_dashboard=False, log_to_driver=True, _node_ip_address=node_ip, num_cpus=cpus
        )
    finally:
        token_note.removeFilter(quiet)


class _DropTokenNote(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Token authentication is enabled" not in record.getMessage()


def _started_here() -> str | None:
    """The address of the cluster the last ``ray start`` on this machine made, if any
    (Ray's own lookup: the address file in its temp dir, which ``ray stop`` removes)."""
    try:
        from ray._private.services import find_bootstrap_address

        return find_bootstrap_address(None)
    except Exception as exc:  # noqa: BLE001 - a private helper: no answer means none
        logger.debug("looking for a local cluster failed: %s", exc)
        return None


def alive_nodes() -> list[dict]:
    """Ray's records of the nodes that are alive now."""
    return [n for n in ray.nodes() if n.get("Alive")]


def alive_node_ids() -> set[str]:
    return {n["NodeID"] for n in alive_nodes()}


def refusing_nodes(node_ids: set[str], timeout_s: float = 1.0) -> set[str]:
    """Of these nodes that Ray's records call alive, those whose raylet port refuses a
    TCP connection: the machine answers and no raylet listens there.

    A killed node reads alive for as long as Ray's health checks take to fail (3 s in
    ``raytf local``, 15 s with Ray's defaults), and its placement groups read
    ``CREATED``: a restart that trusted them placed a worker there and waited out the
    set-up timeout (seen: 120 s). Only a refusal counts: a connection that times out or
    finds no route (a machine that is gone, or a driver outside the cluster's network)
    proves nothing, and any other failure of the question answers "none".
    """
    try:
        records = [n for n in alive_nodes() if n["NodeID"] in node_ids]
        if not records:
            return set()

        def refuses(record: dict) -> bool:
            address = (record["NodeManagerAddress"], int(record["NodeManagerPort"]))
            try:
                socket.create_connection(address, timeout=timeout_s).close()
            except ConnectionRefusedError:
                return True
            except OSError:  # timed out, no route: no evidence either way
                return False
            return False

        with ThreadPoolExecutor(max_workers=min(32, len(records))) as pool:
            refused = list(pool.map(refuses, records))
        return {r["NodeID"] for r, no in zip(records, refused) if no}
    except Exception as exc:  # noqa: BLE001 - no answer is no evidence of a dead node
        logger.debug("raylet reachability check failed: %s", exc)
        return set()


def nodes_with_room(bundle: dict[str, float]) -> list[str]:
    """Live nodes whose free resources hold one ``bundle`` now, by node id; none where
    the query fails (Ray's own per-node view, a private helper)."""
    try:
        from ray._private.state import available_resources_per_node

        free = available_resources_per_node()
    except Exception as exc:  # noqa: BLE001 - no answer: no room known
        logger.debug("free-resources query failed: %s", exc)
        return []
    need = {k: v for k, v in bundle.items() if v}
    return sorted(n for n, res in free.items() if all(res.get(k, 0) >= v for k, v in need.items()))


def alive_node_resources() -> list[dict[str, float]]:
    return [n["Resources"] for n in alive_nodes()]


def draining_nodes() -> dict[str, float]:
    """Nodes Ray is draining (a spot node about to go) -> deadline (Unix seconds, 0 if none).

    Empty if the query is unavailable. ``get_draining_nodes`` is Ray's own (private)
    GCS query; ``ray drain-node`` and the autoscaler's preemption handling set it.
    """
    try:
        from ray._private.state import state as gcs_state

        return {n: ms / 1000.0 for n, ms in gcs_state.get_draining_nodes().items()}
    except Exception as exc:  # noqa: BLE001 - an unavailable query is not a drain
        logger.debug("draining-node query failed: %s", exc)
        return {}
