"""TF_CONFIG for MultiWorkerMirroredStrategy, built from the workers' addresses.

A pure function so the cluster layout can be checked in milliseconds: every
worker gets the same cluster spec (ordered by rank) and its own task index.
Rank 0 is TF's chief role in everything but name: MWMS treats worker 0 as the
chief, so raytf lists only ``worker`` tasks and never a separate ``chief``.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence


def format_address(host: str, port: int) -> str:
    """``host:port``, with brackets for IPv6 as gRPC expects."""
    if not 0 < int(port) < 65536:
        raise ValueError(f"port {port!r} is outside 1..65535")
    try:
        if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address):
            return f"[{host}]:{int(port)}"
    except ValueError:
        pass  # a hostname, not a literal address
    return f"{host}:{int(port)}"


def build_tf_config(addresses: Sequence[tuple[str, int]], rank: int) -> dict:
    """TF_CONFIG for the worker of ``rank`` in a group whose rank-ordered addresses are given."""
    if not addresses:
        raise ValueError("a worker group needs at least one address")
    if not 0 <= rank < len(addresses):
        raise ValueError(f"rank {rank} is outside 0..{len(addresses) - 1}")
    workers = [format_address(h, p) for h, p in addresses]
    if len(set(workers)) != len(workers):
        raise ValueError(f"two workers share an address: {workers}")
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}


def tf_config_json(addresses: Sequence[tuple[str, int]], rank: int) -> str:
    return json.dumps(build_tf_config(addresses, rank), sort_keys=True)


def tf_config_jsons(addresses: Sequence[tuple[str, int]]) -> list[str]:
    """Every rank's ``tf_config_json``, the cluster built and checked once: per rank
    only the index differs, and a group of 1,024 building the list 1,024 times spent
    10 s of the driver's start-up parsing the same addresses (the simulated bench)."""
    one = tf_config_json(addresses, 0)
    head, tail = one.split('"index": 0', 1)
    return [f'{head}"index": {rank}{tail}' for rank in range(len(addresses))]
