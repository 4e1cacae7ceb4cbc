"""Ray Data input: a Keras 3 classifier trained on N workers from a Parquet file.

    python jobs/train_ray_data.py --workers 2 --epochs 3
    ray job submit --address http://HEAD:8265 --runtime-env-json '{"working_dir": "jobs"}' \
        -- python train_ray_data.py --workers 2 --epochs 3 --storage /shared/runs

The job writes the synthetic data set (``raytf.data.synthetic``, 8192 rows) as a
Parquet file of flat columns (``id``, ``label``, ``f0`` .. ``f31``) under the
storage path, then reads it with Ray Data. The preprocessing runs on Ray
Data's side, in its own tasks (on CPU nodes of a cluster): a ``map_batches``
that standardises the features and packs them into one tensor column ``x``.
Each worker reads its equal shard through ``raytf.get_dataset_shard`` as a
``tf.data.Dataset`` of per-replica batches.

Resume is at epoch boundaries (docs/data_and_tune.md): the job checkpoints at
each epoch's end, so a recovery redoes the interrupted epoch from its start
and every example is trained on exactly once per epoch. ``--count-examples``
proves it: a checkpointed per-epoch count of every example id ends in the
summary. The last line printed is one JSON object, as in train_synthetic.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import ray

import raytf
from raytf import ensure_ray
from raytf.data.synthetic import NUM_CLASSES, NUM_EXAMPLES, NUM_FEATURES, make_dataset, seen_summary
from raytf.digests import weights_digest

FEATURES = [f"f{i}" for i in range(NUM_FEATURES)]


def write_parquet(path: str, seed: int, rows: int = NUM_EXAMPLES) -> str:
    """The synthetic data set as a Parquet file of flat columns, written once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not os.path.exists(path):
        x, y = make_dataset(seed, rows)
        x = x * 3.0 + 1.0  # raw scale, undone by the preprocessing below
        columns = {"id": np.arange(len(y), dtype=np.int64), "label": y}
        columns.update({name: x[:, i] for i, name in enumerate(FEATURES)})
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        pq.write_table(pa.table(columns), tmp, row_group_size=1024)
        os.replace(tmp, path)
    return path


def preprocess(batch: dict) -> dict:
    """Runs in Ray Data's tasks: standardise, and pack the features into one column."""
    x = np.stack([batch[name] for name in FEATURES], axis=1).astype(np.float32)
    return {"x": (x - 1.0) / 3.0, "label": batch["label"].astype(np.int32), "id": batch["id"]}


def make_datasets(path: str):
    return {"train": ray.data.read_parquet(path).map_batches(preprocess, batch_format="numpy")}


def train_loop(config: dict) -> dict:
    """Runs on every worker: epochs over this rank's shard, a checkpoint at each end."""
    import keras
    import tensorflow as tf

    ctx = raytf.get_context()
    strategy = ctx.strategy
    global_batch = int(config["batch_size"])
    epochs = int(config["epochs"])
    count = bool(config.get("count_examples"))
    keras.utils.set_random_seed(int(config["seed"]))

    shard = ctx.get_dataset_shard("train")
    data = shard.to_tf("x", "label", additional_columns="id", global_batch_size=global_batch)
    dist = strategy.distribute_datasets_from_function(lambda _: data)

    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((NUM_FEATURES,)),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(NUM_CLASSES),
            ]
        )
        optimizer = keras.optimizers.Adam(learning_rate=float(config.get("lr", 1e-3)))
        epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epochs_done")
        # seen[e, i]: how many times example i was trained on in epoch e.
        seen = tf.Variable(tf.zeros([epochs, NUM_EXAMPLES], tf.int32), trainable=False)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    step = ctx.restore(model=model, optimizer=optimizer, epochs_done=epoch_var, seen=seen)

    def step_fn(x, y, idx):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        hits = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1, tf.int32), y), tf.float32))
        ids = tf.cast(idx, tf.int32)
        return loss, hits, tf.math.bincount(ids, minlength=NUM_EXAMPLES, maxlength=NUM_EXAMPLES)

    @tf.function
    def train_step(batch, epoch):
        loss, hits, counts = strategy.run(step_fn, args=batch)
        sum_ = tf.distribute.ReduceOp.SUM
        if count:
            total = strategy.reduce(sum_, counts, axis=None)
            seen.assign_add(tf.scatter_nd([[epoch]], [total], seen.shape))
        return strategy.reduce(sum_, loss, axis=None), strategy.reduce(sum_, hits, axis=None)

    step_sleep = float(config.get("step_sleep", 0.0))
    for epoch in range(int(epoch_var.numpy()), epochs):
        t0, steps_before = time.monotonic(), step
        for batch in dist:  # one pass over the shard: one epoch
            loss, hits = train_step(batch, tf.constant(epoch))
            step += 1
            if step_sleep:
                time.sleep(step_sleep)  # paces fault tests
            ctx.step_end(step)
            if step % 8 == 0:
                ctx.report({"step": step, "epoch": epoch, "loss": float(loss)})
        epoch_var.assign(epoch + 1)
        ctx.checkpoint_now(step, "epoch")  # resume lands on this epoch boundary
        took = time.monotonic() - t0
        ctx.report(
            {
                "step": step,
                "epoch": epoch,
                "loss": float(loss),
                "accuracy": float(hits) / global_batch,
                "epoch_end": True,
            },
            examples=(step - steps_before) * global_batch,
        )
        if ctx.is_chief:
            print(f"epoch {epoch}: {step - steps_before} steps in {took:.1f} s", flush=True)
    out = {"weights_digest": weights_digest(model.get_weights()), "steps": step}
    if count:
        out["examples_seen"] = seen_summary(seen.numpy())  # over every epoch's row
    return out


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128, help="global batch size")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--storage", default=None, help="storage path (default ~/raytf_results)")
    p.add_argument("--name", default=None, help="run name (default: timestamped)")
    p.add_argument("--max-failures", type=int, default=None, help="0: none, -1: no limit")
    p.add_argument("--count-examples", action="store_true", help="count each example's uses")
    p.add_argument("--step-sleep", type=float, default=0.0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    t0 = time.monotonic()
    connected_before = ray.is_initialized()
    run_config = raytf.RunConfig(
        name=args.name,
        storage_path=args.storage,
        checkpoint_config=raytf.CheckpointConfig(num_to_keep=2),
        failure_config=raytf.FailureConfig(max_failures=args.max_failures),
    )
    data_file = os.path.join(run_config.storage_path, "data", f"synthetic-{args.seed}.parquet")
    # Ray Data needs the cluster before the datasets are built, and CPUs of its own.
    ensure_ray(min_cpus=args.workers + 2)
    trainer = raytf.Trainer(
        train_loop,
        train_loop_config={
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "seed": args.seed,
            "count_examples": args.count_examples,
            "step_sleep": args.step_sleep,
        },
        datasets=make_datasets(write_parquet(data_file, args.seed)),
        scaling_config=raytf.ScalingConfig(
            num_workers=args.workers, global_batch_size=args.batch_size
        ),
        run_config=run_config,
    )
    result = trainer.fit()
    if not connected_before:
        ray.shutdown()
    summary = result.summary(time.monotonic() - t0)
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary


if __name__ == "__main__":
    sys.exit(0 if main()["digests_agree"] else 1)
