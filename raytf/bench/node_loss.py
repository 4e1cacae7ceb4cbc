"""``raytf bench node-loss``: what a lost node costs under Ray's default health checks.

    raytf bench node-loss --kills 5 --json FILE

A simulated cluster (``raytf.tools.local.LocalCluster``: a head that runs no
workers and three 1-CPU nodes, with Ray's own health-check defaults, as a
cloud cluster has them) and a driver process of its own training a small MLP,
paced (a checkpoint every 10 steps), for a fixed group of 2 workers and an
elastic (2, 3) one. ``--kills`` times: the node of the highest rank is
SIGKILLed, as a lost machine ends, then a new node is added (the spare the
next kill needs; the elastic group grows back onto it before that kill).
Each kill comes once the attempt has trained ``WARM_S``, with standbys asked
for 2 s into it (``--standby-after``, the run's ``RAYTF_STANDBY_AFTER_S``): a
node lost hours into a run finds them imported, as here. With 30 (raytf's
default) every kill comes before them: the cold case.

Each kill's figures: ``kill_to_training_s``, from the kill to the first step
of the attempt after it (``state.json``'s ``resumed_at``), ``attempts``, the
attempts the loss cost (one lost node, one retry, is the goal), and
``warm_ranks``, the ranks of that attempt whose process was already running
(a standby or a fixed group's reserve, promoted). The
driver, the pool, placement and the restart are production code; the cluster
is local processes (each node a ``ray start`` of its own), the work a toy.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

KINDS = {"fixed": "2", "elastic": "2,3"}
STEP_SLEEP_S = 0.1
WARM_S = 20.0  # trained this long into an attempt, its standbys have imported TensorFlow


def parse_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="raytf bench node-loss", description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=5, help="nodes killed per kind of group")
    p.add_argument("--kinds", default="fixed,elastic", help="fixed, elastic")
    p.add_argument("--json", default=None, help="file for the figures")
    p.add_argument(
        "--fast-health-checks",
        action="store_true",
        help="the tests' health checks (a node found dead in about 3 s), not Ray's defaults",
    )
    p.add_argument(
        "--standby-after",
        type=float,
        default=2.0,
        help="RAYTF_STANDBY_AFTER_S for the run (2; 30, raytf's default, makes every kill "
        "find no standby: the cold case)",
    )
    p.add_argument("--drive", default=None, help=argparse.SUPPRESS)  # the driver process
    p.add_argument("--storage", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def drive(kind: str, storage: str) -> None:
    """The driver process: trains until it is killed."""
    import raytf
    from raytf.bench.checkpoints import loop

    low, _, high = KINDS[kind].partition(",")
    workers = (int(low), int(high)) if high else int(low)
    config = {"steps": 10**7, "width": 64, "depth": 32, "every": 10}
    config.update(report_steps=False, step_sleep=STEP_SLEEP_S)
    raytf.Trainer(
        loop,
        train_loop_config=config,
        scaling_config=raytf.ScalingConfig(num_workers=workers),
        run_config=raytf.RunConfig(
            name=kind,
            storage_path=storage,
            verbose=0,
            failure_config=raytf.FailureConfig(max_failures=-1),
            checkpoint_config=raytf.CheckpointConfig(checkpoint_every_steps=10),
        ),
    ).fit()


def _state(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, "state.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _wait(run_dir: str, proc, ok, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the driver ended (rc {proc.returncode})")
        st = _state(run_dir)
        if st.get("state") == "RUNNING" and ok(st):
            return st
        time.sleep(0.05)
    raise TimeoutError(f"{run_dir}: not there in {timeout:.0f} s: {_state(run_dir)}")


def _warm_ranks(st: dict, killed_at: float) -> int:
    """Ranks of the attempt after the kill whose process started before it: a standby
    or the reserve promoted, not a new process importing TensorFlow."""
    startup = st.get("startup") or {}
    origin = startup.get("driver_started", 0.0)
    starts = [r.get("process_start") for r in (startup.get("ranks") or {}).values()]
    return sum(1 for t in starts if t is not None and origin + t < killed_at)


def one_kind(
    kind: str, kills: int, scratch: str, fast: bool = False, standby_after: float = 2.0
) -> list[dict]:
    from raytf.tools.local.cluster import SIMULATED_HEALTH_CHECK, LocalCluster

    storage = os.path.join(scratch, "runs")
    run_dir = os.path.join(storage, kind)
    most = int(KINDS[kind].split(",")[-1])
    rows = []
    health = SIMULATED_HEALTH_CHECK if fast else None  # None: Ray's defaults
    with LocalCluster(num_nodes=3, cpus_per_node=1, head_cpus=0, system_config=health) as cluster:
        env = {**os.environ, **cluster.client_env(), "RAYTF_STANDBY_AFTER_S": str(standby_after)}
        log = open(os.path.join(scratch, f"{kind}.log"), "ab")
        cmd = [sys.executable, "-m", "raytf.bench.node_loss", "--drive", kind]
        proc = subprocess.Popen([*cmd, "--storage", storage], env=env, stdout=log, stderr=log)
        try:
            st = _wait(run_dir, proc, lambda s: (s.get("last_step") or 0) >= 20)
            for _ in range(kills):
                st = _wait(run_dir, proc, lambda s: len(s.get("workers", [])) == most)
                # Training at full size again (a grown group's resize resumed), not only
                # placed: else that resize's first step would count as this kill's.
                past, now = st["attempt"], st.get("last_step") or 0

                def steady(s, a=past, n=now):
                    return s["attempt"] == a and (s.get("last_step") or 0) > n + 10

                st = _wait(run_dir, proc, steady)
                first = st["startup"]["driver_started"] + st["startup"]["workers_first_step"]
                time.sleep(max(0.0, first + WARM_S - time.time()))
                st = _state(run_dir)
                last = max(st["workers"], key=lambda w: w["rank"])
                node = next(i for i, n in enumerate(cluster.nodes) if n.ip == last["node_ip"])
                seen, attempt = len(st.get("resumed_at", [])), st["attempt"]
                killed_at = time.time()
                cluster.kill_node(node)
                st = _wait(run_dir, proc, lambda s, seen=seen: len(s.get("resumed_at", [])) > seen)
                rows.append(
                    {
                        "kind": kind,
                        "kill_to_training_s": round(st["resumed_at"][seen] - killed_at, 2),
                        # The restart's own part: its start to the first resumed step.
                        "restart_s": round(st["recoveries_s"][-1], 2),
                        "attempts": st["attempt"] - attempt,
                        "workers_after": len(st["workers"]),
                        "warm_ranks": _warm_ranks(st, killed_at),
                    }
                )
                print(f"bench node-loss: {rows[-1]}", flush=True)
                cluster.add_node()  # the next kill's spare
        finally:
            proc.send_signal(signal.SIGKILL)  # its actors end with it
            proc.wait(timeout=60)
            log.close()
    return rows


def main(argv=None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.drive:
        drive(args.drive, args.storage)
        return {}
    scratch = tempfile.mkdtemp(prefix="raytf-bench-node-loss-")
    out: dict = {"kills": []}
    for kind in [k for k in args.kinds.split(",") if k]:
        rows = one_kind(kind, args.kills, scratch, args.fast_health_checks, args.standby_after)
        out["kills"] += rows
        times = [r["kill_to_training_s"] for r in rows]
        out[f"{kind}_median_s"] = statistics.median(times)
        out[f"{kind}_attempts_per_loss"] = [r["attempts"] for r in rows]
        print(f"bench node-loss: {kind} median {out[f'{kind}_median_s']:.2f} s of {times}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    print(f"bench node-loss: the drivers' output is in {scratch}", flush=True)
    return out


if __name__ == "__main__":
    main()
