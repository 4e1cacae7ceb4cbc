"""The GPU check of raytf's fault tolerance: run it whenever a GPU machine is at hand.

    python jobs/gpu_check.py                 # every GPU here, the large model
    python jobs/gpu_check.py --smoke         # CPU, a tiny model: what the suite runs

Two parts, each on the large-model workload of ``raytf bench checkpoints`` (an MLP
1024-4096-4096-1024 with Adam, 302 MB of state):

1. **Where the safety copy lives.** In a process of its own (TensorFlow takes the
   GPU's memory for itself), the model is built on the first device and the copy
   an emergency checkpoint keeps (``raytf.checkpoint.snapshot.Reader``) is read: every
   copied tensor must be on its variable's device, never the host. Its cost is
   timed too: steps right after a copy against steps after none.
2. **What fault tolerance costs and buys**, from whole raytf runs on the GPUs
   (one worker each; two on CPU): the defaults' cost per step against protection off
   (``--cost-pairs`` paired runs, with a 95 % interval), ``--recovery-kills`` recoveries
   after a SIGKILL and the goodput with one SIGKILL every ``--kill-every`` seconds. With
   one GPU there is one worker: a SIGKILL leaves no survivor, so recovery reads the last
   commit.

Prints one table; ``--json`` keeps the raw figures. Exits 1 if the copy left the
device.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def device_part(args) -> dict:
    """Part 1, in this process: build, train, copy, check the devices, time the copy."""
    import numpy as np
    import tensorflow as tf

    from raytf.bench.checkpoints import large_model
    from raytf.checkpoint import snapshot

    gpus = tf.config.list_physical_devices("GPU")
    device = "/GPU:0" if gpus else "/CPU:0"
    with tf.device(device):
        model, opt, step_fn = large_model(args.width, args.depth)
        train_step = tf.function(step_fn)
        train_step()  # builds Adam's slots
        ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
        reader = snapshot.Reader.of(ckpt)
        assert reader is not None, "the state cannot be read in one traced call"
        held = reader.read()  # what a LastStep holds between copies
        after_copy, after_none = [], []
        for i in range(2 * args.device_steps + 4):
            t = time.perf_counter()
            train_step().numpy()  # the step's end, as the loop sees it
            if i >= 4:
                (after_copy if i % 2 else after_none).append(time.perf_counter() - t)
            if i % 2 == 0:
                held = reader.read()
    variables = {id(v): v for v in model.weights + list(opt.variables)}
    placed = []
    for tensors in held.tensors.values():
        for key, value in tensors.items():
            for t in value.values() if isinstance(value, dict) else [value]:
                if t.dtype != tf.string:
                    placed.append((key, t.device))
    sizes = [int(np.prod(v.shape)) * np.dtype(str(v.dtype)).itemsize for v in variables.values()]
    state_mb = sum(sizes) / 1e6
    off = [(k, d) for k, d in placed if not d.upper().endswith(device.strip("/").upper())]
    step = statistics.median(after_none)
    return {
        "device": device,
        "gpus": len(gpus),
        "state_mb": round(state_mb, 1),
        "copied_tensors": len(placed),
        "off_device": off[:5],
        "step_ms": round(1e3 * step, 3),
        "copy_ms": round(1e3 * (statistics.median(after_copy) - step), 3),
    }


def run_device_part(args) -> dict:
    out = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    cmd = [sys.executable, __file__, "--device-part", out, "--width", str(args.width)]
    cmd += ["--depth", str(args.depth), "--device-steps", str(args.device_steps)]
    subprocess.run(cmd, check=True)
    with open(out) as f:
        doc = json.load(f)
    os.unlink(out)
    return doc


def bench_part(args, gpus: int) -> dict:
    from raytf.bench import checkpoints

    argv = ["--parts", "cost,recovery,goodput", "--cost-steps", str(args.steps)]
    argv += ["--cost-pairs", str(args.cost_pairs), "--recovery-kills", str(args.recovery_kills)]
    argv += ["--workers", str(gpus or 2), "--kill-every", str(args.kill_every)]
    argv += ["--goodput-minutes", str(args.goodput_minutes), "--storage", args.storage]
    argv += ["--width", str(args.width), "--depth", str(args.depth), "--goodput-stores", "local"]
    argv += ["--checkpoint-every", str(args.checkpoint_every)]
    if args.goodput_steps:
        argv += ["--goodput-steps", str(args.goodput_steps)]
    if args.smoke:
        argv.append("--smoke")  # its pace; what is given above still wins
    if gpus:
        argv.append("--use-gpu")
    if args.emergency_every:
        argv += ["--emergency-every", str(args.emergency_every)]
    return checkpoints.main(argv)


def table(device: dict, bench: dict) -> str:
    (cost,) = bench["cost"]
    (rec,) = bench["recovery"] or [{}]
    (good,) = bench["goodput"] or [{}]
    interval = f" +- {cost['ci_pct']:.1f}" if cost["ci_pct"] is not None else ""
    rows = [
        ("device", f"{device['device']} ({device['gpus']} GPU)"),
        ("state", f"{device['state_mb']} MB, {device['copied_tensors']} tensors copied"),
        ("copy on the device", f"NO: {device['off_device']}" if device["off_device"] else "yes"),
        ("copy cost", f"{device['copy_ms']} ms against a {device['step_ms']} ms step"),
        ("step, no fault tolerance", f"{cost['median_step_s'] * 1e3:.1f} ms (mean)"),
        ("step, defaults", f"{cost['cost_pct']:+.1f}{interval} % ({cost['pairs']} pairs)"),
        ("recovery after SIGKILL", f"{rec.get('recoveries_s', ['-'])} s"),
        ("steps redone", str(rec.get("redone_steps", "-"))),
        ("goodput", f"{good.get('goodput_pct', float('nan')):.1f} % ({good.get('kills')} kills)"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="CPU, a tiny model, short runs")
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--depth", type=int, default=1024)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--device-steps", type=int, default=15)
    p.add_argument("--goodput-minutes", type=float, default=3.0)
    p.add_argument("--goodput-steps", type=int, default=None, help="instead of the minutes")
    p.add_argument("--kill-every", type=float, default=60.0)
    p.add_argument("--emergency-every", type=int, default=None)
    p.add_argument("--cost-pairs", type=int, default=3, help="paired runs, defaults vs off")
    p.add_argument("--recovery-kills", type=int, default=5)
    p.add_argument("--storage", default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--device-part", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.smoke:
        p.set_defaults(width=64, depth=32, steps=120, checkpoint_every=10, device_steps=5)
        p.set_defaults(goodput_steps=150, kill_every=15.0, cost_pairs=1, recovery_kills=2)
        args = p.parse_args(argv)
    args.storage = args.storage or tempfile.mkdtemp(prefix="raytf-gpu-check-")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device_part:
        with open(args.device_part, "w") as f:
            json.dump(device_part(args), f)
        return 0
    device = run_device_part(args)
    gpus = 0 if args.smoke else device["gpus"]
    bench = bench_part(args, gpus)
    print(table(device, bench), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device_check": device, "bench": bench}, f, indent=1)
    return 1 if device["off_device"] else 0


if __name__ == "__main__":
    sys.exit(main())
