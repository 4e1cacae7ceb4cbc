"""Repeated kills of the random-layers model, each held to the uninterrupted run (issue 50).

    python -m tests.integration.repeat_kills --out FILE [--steps 8,15,...]

Not collected by pytest (minutes of runs): the evidence behind "a kill anywhere is exact"
for TensorFlow's idiom as written (``jobs/train_keras_fit.py --plain``) with an image
model that draws from random layers (RandomFlip, RandomTranslation, Dropout), keeps
BatchNormalization's statistics per rank (Keras's default), decays its learning rate
and validates each epoch: 3 epochs of 24 steps on 2 workers, a checkpoint every 5 steps.
Rank 1 is SIGKILLed once the run passed each given step; every run's final weights (each
rank's) and Keras's ``History`` are compared with the reference, and its outcome is
"exact", "inexact, said" (a line with "not exact" on screen) or "silent divergence".
A real local Ray instance, real MWMS processes, the real job: nothing stands in.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

import ray

from tests.integration.jobrun import ROOT, JobRun

JOB = os.path.join(ROOT, "jobs", "train_keras_fit.py")
PROGRAM = ["--plain", "--augment", "--bn-per-rank", "--workers", "2", "--epochs", "3"]
PROGRAM += ["--steps-per-epoch", "24", "--checkpoint-every", "5", "--seed", "4"]
PAUSE = ["--step-sleep", "0.05"]  # time to hit mid-fit; changes no number
STEPS = (8, 15, 22, 27, 31, 38, 45, 50, 57, 66)


def outcome_of(summary: dict | None, ref: dict, output: str) -> dict:
    said = [ln for ln in output.splitlines() if "not exact" in ln]
    if not summary:
        return {"outcome": "failed", "said": said}
    same = (
        summary["rank_digests"] == ref["rank_digests"]
        and summary["keras_history"] == ref["keras_history"]
    )
    outcome = "exact" if same else "inexact, said" if said else "silent divergence"
    return {
        "outcome": outcome,
        "attempts": summary["attempts"],
        "weights_equal": summary["rank_digests"] == ref["rank_digests"],
        "history_equal": summary["keras_history"] == ref["keras_history"],
        "said": said[:3],
    }


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="JSON file for the rows")
    p.add_argument("--steps", default=",".join(map(str, STEPS)))
    args = p.parse_args(argv)
    temp = tempfile.mkdtemp(prefix="rk-", dir="/tmp")
    ray.init(num_cpus=4, _temp_dir=os.path.join(temp, "ray"), include_dashboard=False)
    env = {"RAY_ADDRESS": ray.get_runtime_context().gcs_address, "RAY_AUTH_MODE": "token"}
    rows: list[dict] = []
    try:
        storage = os.path.join(temp, "runs")
        os.makedirs(storage)
        rc, ref = JobRun(storage, "ref", *PROGRAM, env=env, job=JOB).start().finish()
        assert rc == 0 and ref and ref["attempts"] == 1, "the reference did not finish"
        for step in map(int, args.steps.split(",")):
            t0 = time.monotonic()
            run = JobRun(storage, f"kill{step}", *PROGRAM, *PAUSE, env=env, job=JOB)
            rc, summary = run.finish_after_killing(1, step=step)
            row = {"kill_after_step": step, "rc": rc, "wall_s": round(time.monotonic() - t0, 1)}
            row.update(outcome_of(summary, ref, run.output()))
            rows.append(row)
            print(json.dumps(row), flush=True)
            with open(args.out, "w") as f:
                json.dump({"reference_attempts": ref["attempts"], "rows": rows}, f, indent=1)
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    return rows


if __name__ == "__main__":
    main()
