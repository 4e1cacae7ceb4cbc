"""``raytf local up | down | kill-node | status``: a multi-node cluster on this machine.

The nodes outlive the command that starts them (each is ``ray start --block``
in its own session), so what ``up`` started is written to a state file and
``down`` stops exactly those processes, by process group, after checking each
pid still runs that node's ``ray start``; never a broad stop command, never anything
else. Nodes bind to loopback addresses (127.0.0.2 and up), the dashboard
included, and Ray's token authentication stays on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from raytf.settings import Settings
from raytf.tools.local.cluster import SIMULATED_HEALTH_CHECK, LocalCluster


def _state_path(args: argparse.Namespace) -> str:
    return args.state or Settings.from_env().local_state


def _load(path: str) -> LocalCluster | None:
    try:
        with open(path) as f:
            return LocalCluster.from_dict(json.load(f))
    except FileNotFoundError:
        return None


def _up(args: argparse.Namespace) -> int:
    path = _state_path(args)
    existing = _load(path)
    if existing is not None and existing.nodes and existing.nodes[0].alive:
        print(
            f"raytf local: a cluster is already up at {existing.address} ({path}); "
            "`raytf local down` first",
            file=sys.stderr,
        )
        return 2
    t0 = time.monotonic()
    cluster = LocalCluster(
        args.nodes,
        cpus_per_node=args.cpus_per_node,
        gpus_per_node=args.gpus_per_node,
        head_cpus=args.head_cpus,
        system_config=None if args.ray_health_checks else SIMULATED_HEALTH_CHECK,
    )
    try:
        cluster.start()
    except RuntimeError as exc:  # start() already stopped what it had started
        print(f"raytf local: could not start the cluster: {exc}", file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(cluster.to_dict(), f, indent=2)
    os.replace(tmp, path)
    env = " ".join(f"{k}={v}" for k, v in cluster.client_env().items())
    gpus = f", {args.gpus_per_node} GPU" if args.gpus_per_node else ""
    print(
        f"raytf local: head + {args.nodes} node(s) ({args.cpus_per_node} CPU{gpus} each) "
        f"up in {time.monotonic() - t0:.1f} s\n"
        f"  export {env}\n"
        f"  dashboard and job API (loopback only): {cluster.dashboard_url}\n"
        f"  ray job submit --address {cluster.dashboard_url} --working-dir . -- "
        "python jobs/train_synthetic.py --workers 2\n"
        f"  state: {path}; stop with: raytf local down"
    )
    return 0


def _require(path: str) -> LocalCluster | None:
    cluster = _load(path)
    if cluster is None:
        print(f"raytf local: no cluster recorded in {path} (`raytf local up`)", file=sys.stderr)
    return cluster


def _down(args: argparse.Namespace) -> int:
    path = _state_path(args)
    cluster = _require(path)
    if cluster is None:
        return 2
    t0 = time.monotonic()
    cluster.stop()
    os.remove(path)
    print(f"raytf local: stopped {len(cluster.nodes)} node(s) in {time.monotonic() - t0:.1f} s")
    return 0


def _kill_node(args: argparse.Namespace) -> int:
    cluster = _require(_state_path(args))
    if cluster is None:
        return 2
    if not 1 <= args.index < len(cluster.nodes):
        print(
            f"raytf local: node {args.index}: worker nodes are 1..{len(cluster.nodes) - 1} "
            "(0 is the head; `raytf local down` stops it)",
            file=sys.stderr,
        )
        return 2
    cluster.kill_node(args.index)
    print(f"raytf local: killed node {args.index} ({cluster.nodes[args.index].ip})")
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = _require(_state_path(args))
    if cluster is None:
        return 2
    doc = cluster.to_dict()
    doc["address"] = cluster.address
    doc["dashboard_url"] = cluster.dashboard_url
    for node, entry in zip(cluster.nodes, doc["nodes"]):
        entry["alive"] = node.alive
    print(json.dumps(doc, indent=2))
    return 0


def add_parser(sub) -> None:
    local = sub.add_parser("local", help="a multi-node Ray cluster on this machine")
    local.add_argument("--state", help="state file (default $RAYTF_LOCAL_STATE or ~/.raytf/...)")
    cmds = local.add_subparsers(dest="local_command", required=True)
    up = cmds.add_parser("up", help="start a head and N worker nodes")
    up.add_argument("--nodes", type=int, default=2, help="worker nodes (besides the head)")
    up.add_argument(
        "--cpus-per-node", type=int, default=2, help="logical CPUs each worker node declares to Ray"
    )
    up.add_argument("--gpus-per-node", type=int, default=0, help="declared as Ray resources")
    up.add_argument("--head-cpus", type=int, default=0, help="0: no training on the head")
    up.add_argument(
        "--ray-health-checks",
        action="store_true",
        help="Ray's own health-check defaults, as a cloud cluster has them (a killed node "
        "is declared dead after about 15 s); without it every 1 s, dead after 3 missed",
    )
    up.set_defaults(func=_up)
    cmds.add_parser("down", help="stop every node `up` started").set_defaults(func=_down)
    kill = cmds.add_parser("kill-node", help="SIGKILL one worker node, as a lost machine")
    kill.add_argument("index", type=int, help="1..N")
    kill.set_defaults(func=_kill_node)
    cmds.add_parser("status", help="the nodes and whether they run").set_defaults(func=_status)
