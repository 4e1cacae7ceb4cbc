"""The floor raytf is measured against: the same training loop in hand-launched MWMS processes.

    python jobs/mwms_baseline.py --workers 2 --steps 256

No Ray: the launcher picks loopback ports, writes each process's TF_CONFIG and
starts ``--workers`` Python processes that each create MWMS and run
``train_synthetic.train_loop`` with a hand-built context, as a user of plain
TensorFlow would. The last line is a JSON summary like train_synthetic's.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def worker_main(rank: int, config: dict) -> None:
    import tensorflow as tf

    sys.path.insert(0, HERE)
    import train_synthetic

    from raytf.context import TrainContext, _ReportBuffer, _set_context

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    tf_config = json.loads(os.environ["TF_CONFIG"])
    world = len(tf_config["cluster"]["worker"])
    _set_context(
        TrainContext(
            strategy=strategy,
            rank=rank,
            world_size=world,
            local_rank=rank,
            node_ip="127.0.0.1",
            config=config,
            run_dir="",
            buffer=_ReportBuffer(),
        )
    )
    out = train_synthetic.train_loop(config)
    print("RESULT " + json.dumps(out), flush=True)


def launch(workers: int, config: dict) -> dict:
    t0 = time.monotonic()
    ports = _free_ports(workers)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for rank in range(workers):
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": rank}}),
            TF_CPP_MIN_LOG_LEVEL="1",
        )
        cmd = [sys.executable, __file__, "--_rank", str(rank), "--_config", json.dumps(config)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    outputs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a worker failed: {[p.returncode for p in procs]}")
    results = [
        json.loads(line[len("RESULT ") :])
        for out in outputs
        for line in out.splitlines()
        if line.startswith("RESULT ")
    ]
    return {
        "elapsed_s": round(time.monotonic() - t0, 3),
        "steps": results[0]["steps"],
        "weights_digest": results[0]["weights_digest"],
        "digests_agree": len({r["weights_digest"] for r in results}) == 1,
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report-every", type=int, default=8)
    p.add_argument("--_rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--_config", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._rank is not None:
        worker_main(args._rank, json.loads(args._config))
        return {}
    config = {
        "steps": args.steps,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "report_every": args.report_every,
        "lr": 1e-3,
    }
    summary = launch(args.workers, config)
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary


if __name__ == "__main__":
    main()
