"""Legacy Keras: ``tf_keras`` ``model.fit`` on N raytf workers with raytf's callback.

    pip install -e '.[cpu,legacy]'      # in this checkout
    python jobs/train_tf_keras.py --workers 2 --epochs 3 --checkpoint-every 64

For code that already uses ``tf_keras`` (Keras 2). New code should prefer
Keras 3 through ``raytf.KerasTrainer`` (``jobs/train_keras.py``): a third of
the step time here. The last line is a JSON summary like the other jobs'.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import ray

import raytf
from raytf.data.synthetic import NUM_CLASSES, NUM_FEATURES, make_dataset
from raytf.digests import weights_digest


def train_loop(config: dict) -> dict:
    import tensorflow as tf
    import tf_keras

    from raytf.keras.legacy import ReportCheckpointCallback

    ctx = raytf.get_context()
    tf_keras.utils.set_random_seed(config["seed"])
    with ctx.strategy.scope():
        model = tf_keras.Sequential(
            [
                tf_keras.Input((NUM_FEATURES,)),
                tf_keras.layers.Dense(64, activation="relu"),
                tf_keras.layers.Dense(64, activation="relu"),
                tf_keras.layers.Dense(NUM_CLASSES),
            ]
        )
        model.compile(
            optimizer=tf_keras.optimizers.Adam(config["lr"]),
            loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    callback = ReportCheckpointCallback(config["report_every"], config["batch_size"])
    start = callback.restore(model)
    steps_per_epoch = config["steps_per_epoch"]
    x, y = make_dataset(config["seed"])
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
    ds = ds.batch(config["batch_size"], drop_remainder=True).skip(start)  # tf_keras shards it
    model.fit(
        ds,
        epochs=config["epochs"],
        initial_epoch=start // steps_per_epoch,
        steps_per_epoch=steps_per_epoch,
        callbacks=[callback],
        verbose=0,
    )
    return {"weights_digest": weights_digest(model.get_weights()), "steps": callback.step}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--steps-per-epoch", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=128, help="global batch size")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report-every", type=int, default=8)
    p.add_argument("--checkpoint-every", type=int, default=None)
    p.add_argument("--storage", default=None)
    p.add_argument("--name", default=None)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    t0 = time.monotonic()
    connected_before = ray.is_initialized()
    result = raytf.Trainer(
        train_loop,
        train_loop_config={
            "epochs": args.epochs,
            "steps_per_epoch": args.steps_per_epoch,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "seed": args.seed,
            "report_every": args.report_every,
        },
        scaling_config=raytf.ScalingConfig(num_workers=args.workers),
        run_config=raytf.RunConfig(
            name=args.name,
            storage_path=args.storage,
            checkpoint_config=raytf.CheckpointConfig(checkpoint_every_steps=args.checkpoint_every),
        ),
    ).fit()
    if not connected_before:
        ray.shutdown()
    summary = result.summary(time.monotonic() - t0)
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary


if __name__ == "__main__":
    sys.exit(0 if main()["digests_agree"] else 1)
