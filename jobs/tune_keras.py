"""Ray Tune over raytf: a small search of learning rate and batch size, ASHA stopping the
worst trials early. Each trial is one raytf run of 2 MWMS workers on the synthetic data.

    python jobs/tune_keras.py                       # 4 trials, 2 workers each, ASHA
    python jobs/tune_keras.py --trials 4 --concurrent 2 --steps 256

Every trial reserves its whole worker group as one placement group (Tune starts
it only when all of its workers fit); rank 0's reports reach Tune as they come
(one Tune iteration per report); ASHA ends a trial whose loss falls behind, and
raytf then tears that trial's workers down. The trial's committed raytf
checkpoints are handed to Tune, which restores a trial from them. The last line
printed is one JSON object: the best trial's config and loss, and every trial's
iterations and whether it was stopped early.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import ray
from ray import cloudpickle, tune
from ray.tune.schedulers import ASHAScheduler

import raytf
from raytf import ensure_ray
from raytf.integrations.tune import checkpoint_step

try:  # run as a script from jobs/, or imported as jobs.tune_keras (the tests)
    import train_synthetic
except ImportError:
    from jobs import train_synthetic

cloudpickle.register_pickle_by_value(train_synthetic)  # workers need not find jobs/


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=4)
    p.add_argument("--workers", type=int, default=2, help="workers per trial")
    p.add_argument("--concurrent", type=int, default=1, help="trials at a time")
    p.add_argument("--steps", type=int, default=256, help="steps per trial at most")
    p.add_argument("--report-every", type=int, default=16, help="steps per Tune iteration")
    p.add_argument("--lrs", type=float, nargs="*", default=None, help="grid instead of sampling")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--storage", default=None, help="storage path (default ~/raytf_results)")
    p.add_argument("--name", default=None, help="experiment name (default: timestamped)")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    t0 = time.monotonic()
    connected_before = ray.is_initialized()
    ensure_ray(min_cpus=args.workers * args.concurrent)
    run_config = raytf.RunConfig(
        name=args.name or time.strftime("tune_%Y%m%d_%H%M%S"),
        storage_path=args.storage,
        checkpoint_config=raytf.CheckpointConfig(num_to_keep=1, checkpoint_every_steps=64),
    )
    trainer = raytf.Trainer(
        train_synthetic.train_loop,
        train_loop_config={
            "steps": args.steps,
            "seed": args.seed,
            "report_every": args.report_every,
        },
        scaling_config=raytf.ScalingConfig(num_workers=args.workers),
        run_config=run_config,
    )
    if args.lrs:
        space = {"lr": tune.grid_search(args.lrs), "batch_size": 128}
        samples = 1
    else:
        space = {"lr": tune.loguniform(1e-5, 3e-2), "batch_size": tune.choice([64, 128])}
        samples = args.trials
    iterations = args.steps // args.report_every
    tuner = tune.Tuner(
        trainer.as_trainable(),
        param_space=space,
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            num_samples=samples,
            # Rung at 2 iterations, then 4, 8, ...: half of the trials go at each rung.
            scheduler=ASHAScheduler(max_t=iterations, grace_period=2, reduction_factor=2),
            search_alg=tune.search.BasicVariantGenerator(
                random_state=args.seed, max_concurrent=args.concurrent
            ),
        ),
        run_config=tune.RunConfig(
            name=run_config.name,
            storage_path=os.path.join(run_config.storage_path, "tune"),
            verbose=1,
        ),
    )
    results = tuner.fit()
    best = results.get_best_result()
    trials = []
    for r in results:
        it = r.metrics.get("training_iteration", 0)
        trials.append(
            {
                "config": {k: r.config[k] for k in ("lr", "batch_size")},
                "iterations": it,
                "loss": r.metrics.get("loss"),
                "stopped_early": it < iterations and r.error is None,
                "error": None if r.error is None else str(r.error).splitlines()[0],
                "checkpoint_step": checkpoint_step(r.checkpoint),
            }
        )
    summary = {
        "best_config": {k: best.config[k] for k in ("lr", "batch_size")},
        "best_loss": best.metrics.get("loss"),
        "trials": trials,
        "elapsed_s": round(time.monotonic() - t0, 3),
    }
    if not connected_before:
        ray.shutdown()
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary


if __name__ == "__main__":
    sys.exit(0 if all(t["error"] is None for t in main()["trials"]) else 1)
