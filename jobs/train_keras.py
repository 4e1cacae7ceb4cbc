"""Keras 3 compile-and-fit on N workers: the synthetic classifier through raytf.KerasTrainer.

    python jobs/train_keras.py --workers 2
    python jobs/train_keras.py --workers 2 --step-mode eager --steps 32   # debuggable steps
    ray job submit --address http://HEAD:8265 --working-dir . \
        -- python jobs/train_keras.py --workers 4 --checkpoint-every 50 --max-failures 3

Same options and the same final JSON line as ``train_synthetic.py`` (whose
loop is written by hand); here the model is an ordinary compiled Keras 3
model and raytf runs Keras's own train step. ``--steps`` is the total number
of global steps, in epochs of ``--steps-per-epoch``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import ray

import raytf
from raytf.data.synthetic import NUM_CLASSES, NUM_FEATURES, make_dataset


def build_model(config: dict):
    """Exactly what one would write for model.fit on one machine."""
    import keras

    keras.utils.set_random_seed(config["seed"])
    model = keras.Sequential(
        [
            keras.Input((NUM_FEATURES,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(NUM_CLASSES),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(config["lr"]),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def dataset_fn(input_context, config: dict):
    """TF's multi-worker recipe: same seeded shuffle everywhere, shard, per-replica batches."""
    import tensorflow as tf

    x, y = make_dataset(config["seed"])
    per_replica = input_context.get_per_replica_batch_size(config["batch_size"])
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.shuffle(len(x), seed=config["seed"], reshuffle_each_iteration=True)
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.batch(per_replica, drop_remainder=True).prefetch(2)


def validation_fn(input_context, config: dict):
    """1024 held-out examples of the same task; evaluated in full at each epoch end."""
    import tensorflow as tf

    x, y = make_dataset(config["seed"], num_examples=1024, split="validation")
    per_replica = input_context.get_per_replica_batch_size(config["batch_size"])
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.batch(per_replica, drop_remainder=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=256, help="global steps in all")
    p.add_argument("--steps-per-epoch", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=128, help="global batch size")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-mode", choices=["eager", "compiled", "xla"], default="compiled")
    p.add_argument("--steps-per-call", type=int, default=1)
    p.add_argument("--validate", action="store_true", help="val_* metrics each epoch")
    p.add_argument("--storage", default=None, help="storage path (default ~/raytf_results)")
    p.add_argument("--name", default=None, help="run name (default: timestamped)")
    p.add_argument("--use-gpu", action="store_true")
    p.add_argument("--report-every", type=int, default=8)
    p.add_argument("--checkpoint-every", type=int, default=None, help="steps between checkpoints")
    p.add_argument("--keep", type=int, default=3, help="committed checkpoints to keep")
    p.add_argument("--max-failures", type=int, default=None, help="0: none, -1: no limit")
    p.add_argument("--hang-timeout", type=float, default=120.0, help="watchdog, seconds")
    p.add_argument("--step-sleep", type=float, default=0.0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    import keras

    args = parse_args(argv)
    t0 = time.monotonic()
    connected_before = ray.is_initialized()
    callbacks = []
    if args.step_sleep:  # stands in for a heavier model in fault tests
        sleep = args.step_sleep
        callbacks.append(
            keras.callbacks.LambdaCallback(on_train_batch_end=lambda *_, **__: time.sleep(sleep))
        )
    trainer = raytf.KerasTrainer(
        build_model,
        dataset_fn,
        global_batch_size=args.batch_size,
        epochs=math.ceil(args.steps / args.steps_per_epoch),
        steps_per_epoch=args.steps_per_epoch,
        validation_fn=validation_fn if args.validate else None,
        callbacks=callbacks,
        step_mode=args.step_mode,
        steps_per_call=args.steps_per_call,
        report_every=args.report_every,
        return_weights=False,
        train_loop_config={"seed": args.seed, "lr": args.lr, "batch_size": args.batch_size},
        scaling_config=raytf.ScalingConfig(num_workers=args.workers, use_gpu=args.use_gpu),
        run_config=raytf.RunConfig(
            name=args.name,
            storage_path=args.storage,
            checkpoint_config=raytf.CheckpointConfig(
                num_to_keep=args.keep, checkpoint_every_steps=args.checkpoint_every
            ),
            failure_config=raytf.FailureConfig(
                max_failures=args.max_failures, hang_timeout_s=args.hang_timeout
            ),
        ),
    )
    result = trainer.fit()
    if not connected_before:
        ray.shutdown()  # no worker output may follow the JSON line below
    summary = result.summary(time.monotonic() - t0)
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary


if __name__ == "__main__":
    sys.exit(0 if main()["digests_agree"] else 1)
