"""``raytf bench`` / ``python jobs/benchmark.py``: run the benchmark, print and write the table.

    python jobs/benchmark.py                        # the full run on this machine
    python jobs/benchmark.py --smoke                # seconds per way: every figure, tiny sizes
    python jobs/benchmark.py --use-gpu --workers 4  # one GPU per worker, NCCL
    raytf bench checkpoints ...                     # a large model's checkpoints (its module)
    raytf bench node-loss --kills 5                 # a lost node under Ray's health checks
    raytf bench control-plane --workers 4,1024      # the driver at scale, simulated ranks

Repeats interleave the ways (raytf, MWMS, Ray Train, raytf, ...) so a slow
spell of the machine blurs all three alike. One Ray instance serves raytf and
Ray Train (started here unless ``RAY_ADDRESS`` names one; its start is not
counted). The table goes between the markers of ``--out`` (the rest of that
file is kept) and the raw figures to ``--json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time

from raytf.bench import report
from raytf.bench.harness import measure
from raytf.bench.report import write_between_markers
from raytf.bench.ways import raytrain_available

# Per workload: global batch, steps of a plain run, steps of a recovery run (long
# enough that the kill, ``--kill-after`` seconds in, lands mid-run).
SIZES = {"mlp": (128, 256, 3072), "conv": (64, 128, 1024)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="raytf bench", description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2, help="workers in every run")
    p.add_argument("--repeats", type=int, default=3, help="runs of each way and workload (medians)")
    p.add_argument("--workloads", default="mlp,conv", help="comma-separated: mlp, conv")
    p.add_argument("--ways", default="raytf,mwms,raytrain", help="comma-separated")
    p.add_argument("--steps", type=int, default=None, help="override every workload's steps")
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    p.add_argument("--report-every", type=int, default=64, help="steps between metric reports")
    p.add_argument(
        "--kill-after", type=float, default=15.0, help="SIGKILL rank 1 this long into training"
    )
    p.add_argument("--no-recovery", action="store_true", help="skip the SIGKILL runs")
    p.add_argument("--scale", default="4,16,64", help="control-plane sizes ('' to skip)")
    p.add_argument("--scale-steps", type=int, default=500, help="steps of each control-plane run")
    p.add_argument("--use-gpu", action="store_true", help="one GPU per worker, NCCL")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat (the test)")
    p.add_argument("--out", default=None, help="Markdown file to write the table into")
    p.add_argument("--json", default=None, help="file for the raw figures")
    p.add_argument("--storage", default=None, help="scratch directory (default: a temp dir)")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.smoke:
        args.repeats, args.steps, args.checkpoint_every, args.kill_after = 1, 64, 16, 0.1
        args.report_every = 8
        args.scale, args.scale_steps = "2,4", 40
    return args


def ensure_ray() -> None:
    from raytf.group.cluster import ensure_ray as join_or_start

    join_or_start()


def plan(args) -> list[tuple[str, str, str, dict]]:
    """(workload, way, kind, options) for one repeat, ways interleaved.

    The floor has no checkpoints or recovery of its own. In smoke mode Ray
    Train makes its plain run only (its start-up alone is about 20 s here), and
    raytf no separate checkpoint run: its recovery run saves too.
    """
    ways = [w for w in args.ways.split(",") if w]
    ckpt = {"checkpoint_every": args.checkpoint_every}
    kinds = [("base", {})] + ([] if args.smoke else [("ckpt", ckpt)])
    if not args.no_recovery:
        kinds.append(("recovery", {**ckpt, "kill_after_s": args.kill_after}))
    out = []
    for workload in [w for w in args.workloads.split(",") if w]:
        for kind, opts in kinds:
            for way in ways:
                if kind != "base" and (way == "mwms" or (way == "raytrain" and args.smoke)):
                    continue
                out.append((workload, way, kind, opts))
    return out


def run(args) -> dict:
    ways = [w for w in args.ways.split(",") if w]
    if "raytrain" in ways and (why := raytrain_available()):
        print(f"bench: Ray Train left out: {why}", file=sys.stderr)
        args.ways = ",".join(w for w in ways if w != "raytrain")
    storage = args.storage or tempfile.mkdtemp(prefix="raytf-bench-")
    os.makedirs(storage, exist_ok=True)
    ensure_ray()
    runs: dict = {}
    for rep in range(args.repeats):
        for workload, way, kind, opts in plan(args):
            batch, steps, recovery_steps = SIZES[workload]
            if args.steps:
                steps = recovery_steps = args.steps
            config = {
                "workload": workload,
                "batch_size": batch,
                "steps": recovery_steps if kind == "recovery" else steps,
                "seed": 0,
                "report_every": args.report_every,
            }
            figs = measure(
                way, config, workers=args.workers, use_gpu=args.use_gpu, storage=storage, **opts
            )
            runs.setdefault((workload, way, kind), []).append(figs)
            shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in figs.items()}
            print(f"bench: {rep + 1}/{args.repeats} {workload} {way} {kind}: {shown}", flush=True)
    scale = []
    if args.scale:
        from raytf.bench.control_plane import scale_table

        sizes = [int(n) for n in args.scale.split(",")]
        scale = scale_table(sizes, storage, args.scale_steps, 0.01)
        for row in scale:
            print(f"bench: control plane {row}", flush=True)
    return {"runs": runs, "scale": scale}


def markdown(args, results: dict, took_s: float) -> str:
    command = " ".join(["raytf bench", *args.argv])
    runs = results["runs"]
    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    lines = [
        f"Measured {date} by `{command}` in {took_s / 60:.0f} min.",
        "",
        f"- Machine: {report.machine()}",
        f"- Software: {report.versions()}",
        f"- {args.workers} workers{', one GPU each (NCCL)' if args.use_gpu else ', CPU (RING)'}; "
        f"medians of {args.repeats} runs, (min-max) beside them; "
        f"metrics reported every {args.report_every} steps, "
        f"checkpoints every {args.checkpoint_every} steps; "
        f"recovery runs SIGKILL rank 1 {args.kill_after:g} s after its first step.",
    ]
    for workload in [w for w in args.workloads.split(",") if w]:
        batch, steps, recovery_steps = SIZES[workload]
        steps, recovery_steps = (args.steps, args.steps) if args.steps else (steps, recovery_steps)
        lines += [
            "",
            f"### {workload}: {steps} steps ({recovery_steps} in recovery runs), "
            f"global batch {batch}",
            "",
        ]
        lines += report.table(runs, workload)
        startup = report.startup_lines(runs, workload)
        if startup:
            lines += ["", f"Start-up of raytf's plain {workload} runs (state.json `startup`):", ""]
            lines += startup
    if results["scale"]:
        lines += [
            "",
            f"### Control plane: lite workers (no TF), {args.scale_steps} steps of 10 ms",
            "",
        ]
        lines += report.scale_lines(results["scale"])
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["checkpoints"]:
        from raytf.bench import checkpoints

        return checkpoints.main(argv[1:])
    if argv[:1] == ["node-loss"]:
        from raytf.bench import node_loss

        return node_loss.main(argv[1:])
    if argv[:1] == ["control-plane"]:
        from raytf.bench import scale

        return scale.main(argv[1:])
    args = parse_args(argv)
    t0 = time.monotonic()
    results = run(args)
    text = markdown(args, results, time.monotonic() - t0)
    print(text, flush=True)
    if args.out:
        write_between_markers(args.out, text)
    flat = {
        "runs": {"/".join(k): v for k, v in results["runs"].items()},
        "scale": results["scale"],
        "summary": {w: report.summary(results["runs"], w) for w in args.workloads.split(",")},
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(flat, f, indent=1, sort_keys=True)
    return flat


if __name__ == "__main__":
    main()
