"""Keras 3's own ``model.fit`` on N raytf workers: TensorFlow's idiom, its strategy line changed.

    python jobs/train_keras_fit.py --workers 2 --epochs 3 --checkpoint-every 32

The loop is TensorFlow's single-machine code (``strategy.scope()``,
``model.compile``, ``model.fit`` with validation data) with the strategy taken
from raytf and raytf's Keras callback added for metrics and coordinated
checkpoints (checkpoint at epoch ends for an exact resume). At the end the
chief writes ``RUN_DIR/model/model.keras``; the last line is a JSON summary
like the other jobs', with the final weights and evaluation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import ray

import raytf
import raytf.keras
from raytf.data.synthetic import NUM_CLASSES, NUM_FEATURES, make_dataset
from raytf.digests import weights_digest

VALIDATION_EXAMPLES = 512


def validation_set(seed: int):
    x, y = make_dataset(seed + 1000)
    return x[:VALIDATION_EXAMPLES], y[:VALIDATION_EXAMPLES]


def dense_model(keras):
    return keras.Sequential(
        [
            keras.Input((NUM_FEATURES,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(NUM_CLASSES),
        ]
    )


def image_model(keras, synchronized: bool = True):
    """The layers image models use: random augmentation, BatchNormalization, Dropout.
    Each random layer draws from its own seed generator (``set_random_seed`` seeds them).
    The statistics are synchronized unless ``synchronized=False`` (Keras 3's default, one
    set per worker: each rank's own ride in its state file, and a rank lost mid-run makes
    the restart read the latest full commit, not the survivors' emergency one)."""
    return keras.Sequential(
        [
            keras.Input((NUM_FEATURES,)),
            keras.layers.Reshape((8, NUM_FEATURES // 8, 1)),
            keras.layers.RandomFlip("horizontal"),
            keras.layers.RandomTranslation(0.1, 0.1),
            keras.layers.Conv2D(8, 3, padding="same"),
            keras.layers.BatchNormalization(synchronized=synchronized),
            keras.layers.ReLU(),
            keras.layers.Flatten(),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(NUM_CLASSES),
        ]
    )


def train_loop(config: dict) -> dict:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(config["seed"])
    strategy = raytf.get_context().strategy  # was: tf.distribute.MirroredStrategy()
    with strategy.scope():
        if config["augment"]:
            model = image_model(keras, synchronized=not config.get("bn_per_rank"))
        else:
            model = dense_model(keras)
        lr = config["lr"]
        if config["augment"]:  # a schedule: its step is the optimizer's, restored with it
            total = config["epochs"] * config["steps_per_epoch"]
            lr = keras.optimizers.schedules.CosineDecay(lr, decay_steps=total)
        model.compile(
            optimizer=keras.optimizers.Adam(lr),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    callbacks = []
    if config["step_sleep"]:  # tests: time to signal a worker mid-fit
        pause = keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda *_, **__: time.sleep(config["step_sleep"])
        )
        callbacks.append(pause)
    x, y = make_dataset(config["seed"])
    xv, yv = validation_set(config["seed"])
    val = tf.data.Dataset.from_tensor_slices((xv, yv)).batch(config["batch_size"])
    steps_per_epoch = config["steps_per_epoch"]
    if config["plain"]:
        # TensorFlow's idiom as written: no raytf callback, restore, initial_epoch or skip.
        n = steps_per_epoch * config["batch_size"]
        ds = tf.data.Dataset.from_tensor_slices((x[:n], y[:n])).batch(config["batch_size"])
        history = model.fit(
            ds, epochs=config["epochs"], validation_data=val, callbacks=callbacks, verbose=0
        )
        if config["finetune"]:
            # Fine-tuning as Keras's guide writes it: compile again (a new optimizer, its
            # iterations back at 0) and fit on.
            with strategy.scope():
                model.compile(
                    optimizer=keras.optimizers.Adam(config["lr"] / 10),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    metrics=["accuracy"],
                )
            history = model.fit(
                ds, epochs=config["epochs"], validation_data=val, callbacks=callbacks, verbose=0
            )
    else:
        callback = raytf.keras.ReportCheckpointCallback(
            config["report_every"], config["batch_size"]
        )
        callbacks.insert(0, callback)
        start = callback.restore(model)  # 0, or the step of the checkpoint resumed from
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
        ds = ds.batch(config["batch_size"], drop_remainder=True).skip(start)
        history = model.fit(
            ds,
            epochs=config["epochs"],
            initial_epoch=callback.initial_epoch_for(steps_per_epoch),
            steps_per_epoch=steps_per_epoch,
            validation_data=val,
            callbacks=callbacks,
            verbose=0,
        )
    evaluation = model.evaluate(val, return_dict=True, verbose=0)
    predictions = model.predict(xv[:8], verbose=0)
    return {
        "weights_digest": weights_digest(model.get_weights()),
        # What the all-reduced gradients keep equal on every rank (BatchNormalization's
        # moving statistics are each rank's own in Keras 3).
        "trainable_digest": weights_digest([w.numpy() for w in model.trainable_weights]),
        "steps": int(model.optimizer.iterations.numpy()),
        "keras_history": history.history,
        "weights": [w.tolist() for w in model.get_weights()] if config["return_weights"] else None,
        "evaluate": {k: float(v) for k, v in evaluation.items()},
        "predictions": predictions.tolist(),
    }


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps-per-epoch", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=64, help="global batch size")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report-every", type=int, default=8)
    p.add_argument("--checkpoint-every", type=int, default=None)
    p.add_argument("--keep", type=int, default=None, help="checkpoints to keep")
    p.add_argument("--score", default=None, help="keep the best checkpoints by this metric")
    p.add_argument("--score-order", default="min", choices=("min", "max"))
    p.add_argument(
        "--max-failures", type=int, default=None, help="default: raytf's (FailureConfig)"
    )
    p.add_argument(
        "--emergency-every",
        type=int,
        default=None,
        help="copy the state for emergency checkpoints every N steps (default: measured)",
    )
    p.add_argument("--return-weights", action="store_true")
    p.add_argument(
        "--plain", action="store_true", help="TensorFlow's idiom: no raytf callback in the loop"
    )
    p.add_argument(
        "--finetune", action="store_true", help="with --plain: compile again, then fit again"
    )
    p.add_argument(
        "--augment",
        action="store_true",
        help="an image model: RandomFlip, RandomTranslation, BatchNormalization, Dropout",
    )
    p.add_argument(
        "--bn-per-rank",
        action="store_true",
        help="with --augment: Keras's default BatchNormalization, statistics per worker",
    )
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds after each step")
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
            "return_weights": args.return_weights,
            "step_sleep": args.step_sleep,
            "plain": args.plain,
            "finetune": args.finetune,
            "augment": args.augment,
            "bn_per_rank": args.bn_per_rank,
        },
        scaling_config=raytf.ScalingConfig(num_workers=args.workers),
        run_config=raytf.RunConfig(
            name=args.name,
            storage_path=args.storage,
            verbose=0,
            checkpoint_config=raytf.CheckpointConfig(
                checkpoint_every_steps=args.checkpoint_every,
                num_to_keep=args.keep,
                checkpoint_score_attribute=args.score,
                checkpoint_score_order=args.score_order,
            ),
            failure_config=raytf.FailureConfig(
                max_failures=args.max_failures, emergency_every_steps=args.emergency_every
            ),
        ),
    ).fit()
    if not connected_before:
        ray.shutdown()
    summary = result.summary(time.monotonic() - t0)
    summary["best_checkpoints"] = result.best_checkpoints
    summary["evaluate"] = result.worker_results[0]["evaluate"]
    summary["predictions"] = result.worker_results[0]["predictions"]
    summary["weights"] = result.worker_results[0]["weights"]
    summary["keras_history"] = result.worker_results[0]["keras_history"]
    summary["rank_digests"] = [r["weights_digest"] for r in result.worker_results]
    summary["trainable_agree"] = len({r["trainable_digest"] for r in result.worker_results}) == 1
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary


if __name__ == "__main__":
    sys.exit(0 if main()["trainable_agree"] else 1)
