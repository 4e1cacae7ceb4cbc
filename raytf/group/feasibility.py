"""Can the cluster hold the worker group at all? Decided before anything starts.

A request no node can satisfy would otherwise wait forever for a placement
group; this check names the resource, the amount asked and the most any node
has, so the user can fix the request at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from raytf.errors import UnsatisfiableResourcesError

logger = logging.getLogger("raytf")


def _fmt(amount: float) -> str:
    return str(int(amount)) if float(amount).is_integer() else f"{amount:g}"


def check_satisfiable(
    bundle: Mapping[str, float],
    num_workers: int,
    strategy: str,
    nodes: Sequence[Mapping[str, float]],
) -> None:
    """Raise UnsatisfiableResourcesError if no layout of ``nodes`` can ever hold the group.

    ``nodes`` are the total resources of each alive node. Only per-node limits
    are checked here: a group that fits but whose room is taken by other work
    waits instead (see the placement timeout).
    """
    if not nodes:
        raise UnsatisfiableResourcesError("the Ray cluster has no alive nodes")
    for name, amount in bundle.items():
        most = max(float(n.get(name, 0.0)) for n in nodes)
        if amount > most:
            if most == 0:
                raise UnsatisfiableResourcesError(
                    f"each worker asks for {_fmt(amount)} {name}, but no node of the cluster "
                    f"has any {name}"
                )
            raise UnsatisfiableResourcesError(
                f"each worker asks for {_fmt(amount)} {name}, but the largest node has "
                f"{_fmt(most)} {name}"
            )
    fits = [_copies(bundle, n) for n in nodes]
    if strategy == "STRICT_PACK":
        if max(fits) < num_workers:
            raise UnsatisfiableResourcesError(
                f"STRICT_PACK needs all {num_workers} workers ({_describe(bundle)} each) on one "
                f"node, but the largest node holds {max(fits)}"
            )
    elif strategy == "STRICT_SPREAD":
        usable = sum(1 for f in fits if f >= 1)
        if usable < num_workers:
            raise UnsatisfiableResourcesError(
                f"STRICT_SPREAD needs {num_workers} nodes that each hold {_describe(bundle)}, "
                f"but the cluster has {usable}"
            )
    elif sum(fits) < num_workers:
        raise UnsatisfiableResourcesError(
            f"{num_workers} workers of {_describe(bundle)} need more than the whole cluster "
            f"holds: its nodes fit {sum(fits)} in all"
        )


def _copies(bundle: Mapping[str, float], node: Mapping[str, float]) -> int:
    """How many bundles fit on one node."""
    counts = [
        int(float(node.get(name, 0.0)) // amount + 1e-9)
        for name, amount in bundle.items()
        if amount
    ]
    return min(counts) if counts else 1 << 30


def _describe(bundle: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {_fmt(v)}" for k, v in sorted(bundle.items())) + "}"


def check_cluster(scaling) -> None:
    """Fail at once if the cluster can never hold the group, now or after autoscaling.

    With an autoscaler whose node types are unknown, nothing can be ruled out:
    the placement waits (showing what it waits for) up to its timeout.
    """
    from raytf.group import autoscaler
    from raytf.group.cluster import alive_node_resources

    alive = alive_node_resources()
    # An elastic group starts with min workers: that many must fit, the rest may come later.
    args = (scaling.worker_resources(), scaling.min_workers, scaling.placement_strategy)
    if not autoscaler.autoscaler_running():
        check_satisfiable(*args, alive)
        return
    types = autoscaler.node_types()
    if types is None:
        logger.info("an autoscaler runs but its node types are unknown: placement will wait")
        return
    try:
        check_satisfiable(*args, autoscaler.potential_nodes(alive, types))
    except UnsatisfiableResourcesError as exc:
        shown = ", ".join(f"{n} {t.get('resources', {})}" for n, t in types.items())
        raise UnsatisfiableResourcesError(
            f"{exc}, counting every node the autoscaler could add (node types: {shown})"
        ) from None


def check_data_room(scaling, dataset_names: list[str]) -> None:
    """Without an autoscaler, Ray Data's tasks need CPUs the workers leave free."""
    from raytf.data.feed import check_room
    from raytf.group import autoscaler
    from raytf.group.cluster import alive_node_resources

    if not dataset_names or autoscaler.autoscaler_running():
        return
    cpus = sum(r.get("CPU", 0.0) for r in alive_node_resources())
    workers = scaling.worker_resources().get("CPU", 0.0) * scaling.max_workers
    check_room(sorted(dataset_names), workers, cpus)
