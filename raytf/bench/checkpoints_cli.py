"""``raytf bench checkpoints``'s command line, apart from the bench (which imports
NumPy, Ray and TensorFlow): ``raytf bench checkpoints --help`` and the docs site's
CLI page read it with none of them installed."""

from __future__ import annotations

import argparse
import tempfile

DESCRIPTION = "``raytf bench checkpoints``: a large model's checkpoints, crashes and goodput."
MODES = ("none", "sync", "async", "async+emergency")


def parse_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="raytf bench checkpoints", description=DESCRIPTION)
    p.add_argument("--storage", default=None, help="a path or URL (default: a temp dir)")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--goodput-minutes", type=float, default=10.0, help="0: no goodput run")
    p.add_argument("--goodput-steps", type=int, default=None, help="instead of the minutes")
    p.add_argument("--kill-every", type=float, default=60.0)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument(
        "--emergency-every", type=int, default=None, help="the emergency copy's cadence (measured)"
    )
    p.add_argument(
        "--parts", default="cost,recovery,goodput", help="which: cost, overhead, recovery, goodput"
    )
    p.add_argument("--recovery-kills", type=int, default=1, help="SIGKILLs in one run (p50, p95)")
    p.add_argument("--recovery-gap", type=float, default=20.0, help="seconds between those kills")
    p.add_argument("--goodput-stores", default="local,s3", help="goodput runs' stores")
    p.add_argument("--cost-workloads", default="w2", help="w2, mlp, fit (paired runs)")
    p.add_argument("--cost-pairs", type=int, default=4, help="pairs of runs per workload")
    p.add_argument("--cost-steps", type=int, default=120, help="steps of a w2 cost run")
    p.add_argument("--workers", type=int, default=2, help="one per GPU with --use-gpu")
    p.add_argument("--use-gpu", action="store_true", help="each worker on a GPU of its own")
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--depth", type=int, default=1024)
    p.add_argument("--smoke", action="store_true", help="a tiny model, short runs (the test)")
    p.add_argument("--step-sleep", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--json", default=None, help="file for the raw figures")
    p.add_argument("--report", default=None, help="no run: this JSON's section into --out")
    p.add_argument("--out", default=None, help="with --report: the page (docs/benchmarks.md)")
    p.add_argument("--sizes-mb", default="", help="checkpoint sizes, e.g. 300,1500 (results)")
    p.add_argument("--stores", default="local,s3", help="with --sizes-mb: local, s3")
    p.add_argument("--s3-url", default=None, help="s3 store: this bucket, not the loopback one")
    args = p.parse_args(argv)
    if args.sizes_mb:  # by size only, unless parts are asked for; short runs at size
        # Paced, so that the kill after the second save finds the run still training
        # (state.json, what the killer reads, is written once a second).
        p.set_defaults(parts="sizes", steps=30, checkpoint_every=5, step_sleep=0.15)
        args = p.parse_args(argv)
    if args.smoke:  # smaller defaults; what the command line gives still wins
        # Paced: a tiny model's 60 steps took 0.2 s, over before state.json (written once
        # a second) showed the step the recovery run's kill waits for.
        p.set_defaults(steps=120, width=64, depth=32, checkpoint_every=10, step_sleep=0.02)
        p.set_defaults(goodput_minutes=0.5, kill_every=10.0, recovery_gap=3.0)
        p.set_defaults(goodput_stores="local", cost_pairs=1, cost_steps=60)
        args = p.parse_args(argv)
    args.storage = args.storage or tempfile.mkdtemp(prefix="raytf-bench-ckpt-")
    return args
