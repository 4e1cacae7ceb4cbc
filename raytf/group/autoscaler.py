"""What an autoscaler could add to the cluster, and asking it for the worker group.

Without an autoscaler, the live nodes are all there will be: a group that
cannot fit on them fails at once (``placement.check_satisfiable``). With one,
nodes may still come, so the question becomes whether any *node type* could
hold a worker; only the autoscaling config knows the types. raytf reads it
from ``RAYTF_AUTOSCALER_CONFIG`` or, on a head made by ``ray up``, from
``~/ray_bootstrap_config.yaml`` (where the launcher puts it). When the types
are unknown raytf waits, up to ``RunConfig.placement_timeout_s``.

A pending placement group is already autoscaler demand; raytf also calls
``request_resources`` with the group's bundles, which makes the request
explicit (``ray status`` shows it), and withdraws it once placed so the
nodes can scale down when the run ends.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping

import yaml

from raytf.settings import Settings

logger = logging.getLogger("raytf")

AUTOSCALING_STATUS_KEY = b"__autoscaling_status"  # written by Ray's autoscaler (monitor)
BOOTSTRAP_CONFIG = os.path.join("~", "ray_bootstrap_config.yaml")
READ_ONLY_TYPE_PREFIX = "node_"  # how a monitor without autoscaling config names node types


def autoscaler_running() -> bool:
    """Is an autoscaler that can add nodes watching this cluster?

    Every Ray head runs Ray's monitor, but without an autoscaling config it is
    read-only: it names each node's type ``node_<node id>`` and never launches
    one. A monitor that reports configured type names (or an autoscaling
    config at hand) means nodes may still come.
    """
    if node_types() is not None:
        return True
    try:
        from ray.experimental.internal_kv import _internal_kv_get

        raw = _internal_kv_get(AUTOSCALING_STATUS_KEY)
    except Exception as exc:  # noqa: BLE001 - no answer means no autoscaler to count on
        logger.debug("autoscaler status lookup failed: %s", exc)
        return False
    return raw is not None and reports_node_types(json.loads(raw))


def reports_node_types(status: dict) -> bool:
    """True if the monitor's status names configured node types (it can launch nodes)."""
    report = status.get("autoscaler_report") or {}
    names = set(report.get("active_nodes") or {}) | set(report.get("pending_launches") or {})
    return any(not name.startswith(READ_ONLY_TYPE_PREFIX) for name in names)


def _config() -> dict | None:
    path = Settings.from_env().autoscaler_config or os.path.expanduser(BOOTSTRAP_CONFIG)
    try:
        with open(path) as f:
            return yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError):
        return None


def adds_machines() -> bool:
    """Can an autoscaler bring machines this cluster never had (a cloud's, KubeRay's, the
    fake multinode one)? Not Ray's ``local`` provider: its machines are the listed ones."""
    if not autoscaler_running():
        return False
    provider = ((_config() or {}).get("provider") or {}).get("type")
    return provider != "local"


def node_types() -> dict[str, dict] | None:
    """The autoscaling config's worker node types, or None when no config is at hand."""
    config = _config()
    if config is None:
        return None
    types = config.get("available_node_types") or {}
    head = config.get("head_node_type")
    return {name: spec for name, spec in types.items() if name != head} or None


def potential_nodes(
    alive: list[Mapping[str, float]], types: Mapping[str, Mapping], most_per_type: int = 64
) -> list[Mapping[str, float]]:
    """The live nodes plus every node the autoscaler may still add (capped per type)."""
    out = list(alive)
    for spec in types.values():
        count = min(int(spec.get("max_workers", most_per_type)), most_per_type)
        out += [dict(spec.get("resources", {}))] * count
    return out


def request(bundles: list[dict[str, float]]) -> None:
    """Ask the autoscaler for these bundles (an empty list withdraws the request)."""
    try:
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=bundles)
    except Exception as exc:  # noqa: BLE001 - a cluster without an autoscaler ignores it
        logger.debug("request_resources failed: %s", exc)
