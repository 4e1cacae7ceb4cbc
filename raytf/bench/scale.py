"""``raytf bench control-plane``: the driver from 4 to 1,024 workers, simulated ranks.

    raytf bench control-plane --workers 4,16,64,256,1024 --json FILE

Each size is one run of the production driver (``make_controller``, the
controller, the worker group, the pool's placement group, the watchdog, the
commits, ``state.json`` and ``metrics.jsonl``) over simulated ranks
(``raytf.bench.sim_ranks``: many ranks per Ray actor, a step is a sleep):
``--steps`` steps, a checkpoint every ``--checkpoint-every``, and one rank
that dies at a third of the run, so the group restarts once from the newest
commit. Each run is a driver process of its own (its memory is its own) on
one Ray instance started here.

Its row (``results``, the names other scripts read): ``workers``;
``round_ms_p50`` and ``round_cpu_ms_p50``, a driver round's wall time (the
wait for answers included, the sleep between polls not) and the driver
thread's CPU time in it, medians; ``start_s``, from the first placement to
the slowest rank's first step; ``restart_s``, from the restart's start (the
failure seen) to training again; ``commit_ms``, the median commit of all
ranks' parts on local storage; ``state_json_bytes``, ``state.json`` at the
end; ``driver_rss_mb``, the driver's peak resident memory. Also
``records_bytes`` (every file of the run directory but the checkpoints),
``rounds``, ``commits`` and ``wall_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

KEYS = (
    "workers",
    "round_ms_p50",
    "round_cpu_ms_p50",
    "start_s",
    "restart_s",
    "commit_ms",
    "state_json_bytes",
    "driver_rss_mb",
)


def parse_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="raytf bench control-plane", description=__doc__.split("\n")[0]
    )
    p.add_argument("--workers", default="4,16,64,256,1024", help="comma-separated sizes")
    p.add_argument("--steps", type=int, default=10_000, help="steps of each run")
    p.add_argument("--step-s", type=float, default=0.002, help="seconds a step sleeps")
    p.add_argument("--checkpoint-every", type=int, default=1000, help="steps between commits")
    p.add_argument("--json", default=None, help="file for the figures")
    p.add_argument("--storage", default=None, help="scratch directory (default: a temp dir)")
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # a driver process
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def run_one(workers: int, storage: str, args) -> dict:
    """One run of ``workers`` simulated ranks in this process: its row."""
    from raytf.bench.sim_ranks import SimGroup, SimPool, start_times
    from raytf.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from raytf.driver.launch import RunSpec, make_controller

    name = f"sim-{workers}"
    run_config = RunConfig(
        name=name,
        storage_path=storage,
        verbose=0,
        setup_timeout_s=600.0,
        placement_timeout_s=600.0,
        failure_config=FailureConfig(max_failures=3),
        checkpoint_config=CheckpointConfig(checkpoint_every_steps=args.checkpoint_every),
    )
    # One bundle per rank, as in a real run; small enough that 1,024 fit in one CPU.
    scaling = ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 0.001})
    config = {"steps": args.steps, "step_s": args.step_s, "report_every": 100}
    config["die"] = {"rank": workers - 1, "step": args.steps // 3}
    t0 = time.monotonic()
    controller = make_controller(
        RunSpec(_never_called, config, scaling, run_config), pool_cls=SimPool, group_cls=SimGroup
    )
    result = controller.run()
    wall = time.monotonic() - t0
    run_dir = os.path.join(storage, name)
    rounds = result.driver_round_ms
    starts = start_times()
    commits = _commit_seconds(os.path.join(run_dir, "metrics.jsonl"))
    return {
        "workers": workers,
        "round_ms_p50": rounds.get("median"),
        "round_cpu_ms_p50": rounds.get("cpu_median"),
        "start_s": starts[0]["first_step"] if starts else None,
        "restart_s": round(result.recoveries_s[0], 3) if result.recoveries_s else None,
        "commit_ms": round(1000 * statistics.median(commits), 2) if commits else None,
        "state_json_bytes": os.path.getsize(os.path.join(run_dir, "state.json")),
        "driver_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "records_bytes": _records_bytes(run_dir),
        "rounds": rounds.get("rounds"),
        "round_ms_p90": rounds.get("p90"),
        "commits": len(commits),
        "attempts": result.attempts,
        "steps": args.steps,
        "wall_s": round(wall, 1),
        "start_phases": starts[0] if starts else None,
        "restart_phases": starts[1] if len(starts) > 1 else None,
    }


def _never_called(config: dict) -> None:
    raise AssertionError("simulated ranks never run the loop")


def _commit_seconds(path: str) -> list[float]:
    out = []
    with open(path) as f:
        for line in f:
            doc = json.loads(line)
            if doc.get("type") == "checkpoint" and doc.get("commit_s") is not None:
                out.append(float(doc["commit_s"]))
    return out


def _records_bytes(run_dir: str) -> int:
    total = 0
    for root, dirs, files in os.walk(run_dir):
        dirs[:] = [d for d in dirs if d != "checkpoints"]
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def run_sizes(sizes: list[int], storage: str, args) -> list[dict]:
    """Each size in a driver process of its own, on the Ray instance this one started."""
    from raytf.group.cluster import ensure_ray

    ensure_ray()
    import ray

    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    # Standbys (here: the next attempt's hosts) once training runs a second, as they are
    # 30 s into a real run: the restart promotes them, as production's does.
    env["RAYTF_STANDBY_AFTER_S"] = "1"
    rows = []
    for n in sizes:
        out = os.path.join(storage, f"row-{n}.json")
        cmd = [sys.executable, "-m", "raytf.bench.scale", "--one", str(n), "--out", out]
        cmd += ["--storage", storage, "--steps", str(args.steps), "--step-s", str(args.step_s)]
        cmd += ["--checkpoint-every", str(args.checkpoint_every)]
        subprocess.run(cmd, env=env, check=True)
        with open(out) as f:
            rows.append(json.load(f))
        print(f"bench: control plane {rows[-1]}", flush=True)
    return rows


def main(argv=None) -> dict:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    storage = args.storage or tempfile.mkdtemp(prefix="raytf-scale-")
    os.makedirs(storage, exist_ok=True)
    if args.one is not None:
        row = run_one(args.one, storage, args)
        with open(args.out, "w") as f:
            json.dump(row, f)
        return row
    t0 = time.monotonic()
    rows = run_sizes([int(n) for n in args.workers.split(",") if n], storage, args)
    doc = {
        "results": rows,
        "took_s": round(time.monotonic() - t0, 1),
        "steps": args.steps,
        "step_s": args.step_s,
        "checkpoint_every": args.checkpoint_every,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return doc


if __name__ == "__main__":
    main()
