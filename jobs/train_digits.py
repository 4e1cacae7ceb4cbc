"""A newcomer's template: a small Keras 3 CNN on real data (8x8 digits), on N workers.

    pip install -e '.[cpu,examples]'    # in this checkout; scikit-learn ships the digits
    python jobs/train_digits.py --workers 2

The 1,797 handwritten digits of ``sklearn.datasets.load_digits`` need no
download. The model is written exactly as for ``model.fit`` on one machine;
the two functions below are all raytf needs. Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import ray

import raytf

TRAIN_EXAMPLES = 1536  # the rest (261) is the validation set


def load(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]  # (n, 8, 8, 1) in [0, 1]
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    train, val = order[:TRAIN_EXAMPLES], order[TRAIN_EXAMPLES:]
    return x[train], y[train], x[val], y[val]


def build_model(config: dict):
    import keras

    keras.utils.set_random_seed(config["seed"])
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(config["lr"]),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _pipeline(x, y, input_context, config, shuffle: bool):
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle:  # seeded: every worker shuffles alike, then takes its own shard
        ds = ds.shuffle(len(x), seed=config["seed"], reshuffle_each_iteration=True)
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    per_replica = input_context.get_per_replica_batch_size(config["batch_size"])
    return ds.batch(per_replica, drop_remainder=True)


def train_data(input_context, config: dict):
    x, y, _, _ = load(config["seed"])
    return _pipeline(x, y, input_context, config, shuffle=True)


def val_data(input_context, config: dict):
    _, _, x, y = load(config["seed"])
    return _pipeline(x, y, input_context, config, shuffle=False)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64, help="global batch size")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--storage", default=None)
    p.add_argument("--name", default=None)
    args = p.parse_args(argv)
    connected_before = ray.is_initialized()
    t0 = time.monotonic()
    result = raytf.KerasTrainer(
        build_model,
        train_data,
        validation_fn=val_data,
        global_batch_size=args.batch_size,
        epochs=args.epochs,
        train_loop_config={"seed": args.seed, "lr": args.lr, "batch_size": args.batch_size},
        scaling_config=raytf.ScalingConfig(num_workers=args.workers),
        run_config=raytf.RunConfig(name=args.name, storage_path=args.storage),
    ).fit()
    if not connected_before:
        ray.shutdown()
    summary = result.summary(time.monotonic() - t0)
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary


if __name__ == "__main__":
    sys.exit(0 if main()["digests_agree"] else 1)
