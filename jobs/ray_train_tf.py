"""A Ray Train ``TensorflowTrainer`` script, moved to raytf by changing its imports only.

    python jobs/ray_train_tf.py --workers 2 --epochs 3

The shape of Ray Train's TensorFlow examples: a ``train_func`` that reads
``TF_CONFIG``, creates its own ``MultiWorkerMirroredStrategy``, builds and
compiles a Keras 3 model in its scope, resumes from ``train.get_checkpoint()``
and calls ``model.fit`` with the report callback. Only the import block
differs from the Ray Train version (its lines are kept above, commented);
docs/migrating_from_ray_train.md walks through it. Synthetic data: nothing
is downloaded. The last line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import keras
import numpy as np
import tensorflow as tf

# Ray Train:
#   from ray import train
#   from ray.train import FailureConfig, RunConfig, ScalingConfig
#   from ray.train.tensorflow import TensorflowTrainer
#   from ray.train.tensorflow.keras import ReportCheckpointCallback
from raytf.integrations import ray_train as train
from raytf.integrations.ray_train import (
    FailureConfig,
    ReportCheckpointCallback,
    RunConfig,
    ScalingConfig,
    TensorflowTrainer,
)


def synthetic_dataset(batch_size: int, seed: int = 0) -> tf.data.Dataset:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(4096, 28, 28)).astype("float32")
    y = (x[:, :14].mean(axis=(1, 2)) > x[:, 14:].mean(axis=(1, 2))).astype("int64")
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch_size)


def build_and_compile_model(config: dict) -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input(shape=(28, 28)),
            keras.layers.Reshape(target_shape=(28, 28, 1)),
            keras.layers.Conv2D(8, 3, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(2),
        ]
    )
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.SGD(learning_rate=config.get("lr", 0.05)),
        metrics=["accuracy"],
    )
    return model


def train_func(config: dict) -> dict:
    per_worker_batch_size = config.get("batch_size", 32)
    epochs = config.get("epochs", 3)
    steps_per_epoch = config.get("steps_per_epoch", 16)

    tf_config = json.loads(os.environ["TF_CONFIG"])
    num_workers = len(tf_config["cluster"]["worker"])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    global_batch_size = per_worker_batch_size * num_workers
    dataset = synthetic_dataset(global_batch_size)
    with strategy.scope():
        model = build_and_compile_model(config)

    checkpoint = train.get_checkpoint()
    if checkpoint:  # a restarted attempt: resume from the last reported model
        with checkpoint.as_directory() as checkpoint_dir:
            model.load_weights(os.path.join(checkpoint_dir, "model.keras"))

    history = model.fit(
        dataset,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        callbacks=[ReportCheckpointCallback()],
        verbose=0,
    )
    context = train.get_context()
    return {
        "rank": context.get_world_rank(),
        "world_size": context.get_world_size(),
        "resumed": checkpoint is not None,
        "history": history.history,
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps-per-epoch", type=int, default=16)
    p.add_argument("--max-failures", type=int, default=None, help="default: raytf's")
    p.add_argument("--storage", default=None)
    p.add_argument("--name", default=None)
    args = p.parse_args(argv)
    t0 = time.monotonic()
    trainer = TensorflowTrainer(
        train_loop_per_worker=train_func,
        train_loop_config={
            "lr": 0.05,
            "batch_size": 32,
            "epochs": args.epochs,
            "steps_per_epoch": args.steps_per_epoch,
        },
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=False),
        run_config=RunConfig(
            name=args.name,
            storage_path=args.storage,
            verbose=0,
            failure_config=FailureConfig(max_failures=args.max_failures),
        ),
    )
    result = trainer.fit()
    summary = {
        "elapsed_s": round(time.monotonic() - t0, 3),
        "attempts": result.attempts,
        "checkpoint": result.checkpoint.path if result.checkpoint else None,
        "metrics": result.metrics,
        "workers": result.worker_results,
    }
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary


if __name__ == "__main__":
    main()
    sys.exit(0)
