"""The main example: a Keras 3 classifier trained by a custom MWMS loop on N workers.

    python jobs/train_synthetic.py --workers 2 --steps 256
    python jobs/train_synthetic.py --workers 3 --min-workers 2 --batch-size 96 --max-failures -1
    ray job submit --address http://HEAD:8265 --runtime-env-json '{"working_dir": "jobs"}' \
        -- python train_synthetic.py --workers 2 --checkpoint-every 50 --max-failures 3

The data set is synthetic and deterministic (built from ``--seed``, no
downloads). Every input batch is a pure function of the global step, so a run
is reproducible and could resume at any step. The last line printed is one
JSON object: final metrics, steps, attempts, elapsed time and the SHA-256 of
the final weights, which is identical on every worker.

Elastic (``--min-workers``): the global batch stays ``--batch-size`` whatever
the number of workers, and step ``s`` always reads rows ``[s*B, (s+1)*B)`` of
the data, split over whichever replicas there are, so a resize neither skips
nor repeats an example. ``--count-examples`` proves it: a checkpointed
counter of how often each example was trained on (rolled back with the
weights when a restart redoes steps) ends in the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import ray

import raytf
from raytf.data.synthetic import NUM_CLASSES, NUM_EXAMPLES, NUM_FEATURES, make_dataset, seen_summary
from raytf.digests import weights_digest


def train_loop(config: dict) -> dict:
    """Runs on every worker. The strategy already exists; everything TF happens here."""
    import keras
    import tensorflow as tf

    ctx = raytf.get_context()
    strategy = ctx.strategy
    global_batch = int(config["batch_size"])
    replicas = strategy.num_replicas_in_sync
    if global_batch % replicas:
        raise ValueError(f"global batch {global_batch} does not divide over {replicas} replicas")
    per_replica = global_batch // replicas
    steps = int(config["steps"])
    ctx.set_total_steps(steps)  # `raytf status` shows an ETA
    report_every = int(config.get("report_every", 8))

    keras.utils.set_random_seed(int(config["seed"]))
    x_np, y_np = make_dataset(int(config["seed"]))
    count_examples = bool(config.get("count_examples"))

    def dataset_fn(first_step: int):
        """The input for steps first_step+1 .. steps: a pure function of the global step."""

        def make(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
            # Element i of this pipeline is local replica i % k's batch for step i // k
            # (0-based); its rows are a contiguous slice of that step's global batch.
            x_all, y_all = tf.constant(x_np), tf.constant(y_np)
            k = replicas // input_context.num_input_pipelines
            first_replica = input_context.input_pipeline_id * k

            def batch_at(i):
                step, local = i // k, i % k
                begin = step * global_batch + (first_replica + local) * per_replica
                idx = (begin + tf.range(per_replica, dtype=tf.int64)) % NUM_EXAMPLES
                return tf.gather(x_all, idx), tf.gather(y_all, idx), idx

            ds = tf.data.Dataset.range(first_step * k, steps * k).map(batch_at).prefetch(2)
            # Without tf.data's autotuner: freeing an iterator waits for its thread,
            # whose sleeps grow to a minute, so the loop's return came up to 85 s late.
            options = tf.data.Options()
            options.autotune.enabled = False
            return ds.with_options(options)

        return make

    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((NUM_FEATURES,)),
                keras.layers.Dense(int(config.get("width", 64)), activation="relu"),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(NUM_CLASSES),
            ]
        )
        optimizer = keras.optimizers.Adam(learning_rate=float(config.get("lr", 1e-3)))
        # How many times each example was trained on: checkpointed with the weights.
        seen = tf.Variable(tf.zeros([NUM_EXAMPLES], tf.int32), trainable=False, name="seen")
        # The training steps this loop ran whose effect the weights hold: counted here and
        # checkpointed, so a restore rolls it back with the weights (the summary's "steps").
        steps_run = tf.Variable(0, dtype=tf.int64, trainable=False, name="steps_run")
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    # Resume: weights, optimizer slots, RNG state and the step come back from the
    # latest committed checkpoint; the input restarts at the step after it.
    tracked = {"model": model, "optimizer": optimizer, "steps_run": steps_run}
    if count_examples:
        tracked["seen"] = seen
    start = ctx.restore(**tracked)
    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn(start)))

    def step_fn(x, y, idx):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        predicted = tf.argmax(logits, 1, output_type=tf.int32)
        hits = tf.reduce_sum(tf.cast(tf.equal(predicted, y), "float32"))
        if not count_examples:
            return loss, hits, tf.zeros([], tf.int32)
        ids = tf.cast(idx, tf.int32)
        return loss, hits, tf.math.bincount(ids, minlength=NUM_EXAMPLES, maxlength=NUM_EXAMPLES)

    @tf.function
    def train_step(it):
        loss, hits, counts = strategy.run(step_fn, args=next(it))
        steps_run.assign_add(1)
        sum_ = tf.distribute.ReduceOp.SUM
        if count_examples:
            seen.assign_add(strategy.reduce(sum_, counts, axis=None))
        return strategy.reduce(sum_, loss, axis=None), strategy.reduce(sum_, hits, axis=None)

    step_sleep = float(config.get("step_sleep", 0.0))
    slow_while = config.get("slow_while")  # a fault test paces the run until it is done
    reported = start
    for step in range(start + 1, steps + 1):
        loss, hits = train_step(iterator)
        if step_sleep and (not slow_while or os.path.exists(slow_while)):
            time.sleep(step_sleep)  # stands in for a heavier model in fault tests
        ctx.step_end(step)  # a checkpoint the driver asked for is taken here
        if step % report_every == 0 or step == steps:
            ctx.report(
                {"step": step, "loss": float(loss), "accuracy": float(hits) / global_batch},
                examples=(step - reported) * global_batch,
            )
            reported = step
    out = {"weights_digest": weights_digest(model.get_weights()), "steps": int(steps_run.numpy())}
    out["resumed_from"] = start  # this attempt's first step was the one after it
    if count_examples:
        out["examples_seen"] = seen_summary(seen.numpy())
    return out


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2, help="workers (the most, if elastic)")
    p.add_argument("--min-workers", type=int, default=None, help="elastic: the fewest workers")
    p.add_argument(
        "--elastic-wait", type=float, default=10.0, help="elastic: seconds to wait for more"
    )
    p.add_argument("--steps", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=128, help="global batch size")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--storage", default=None, help="storage path (default ~/raytf_results)")
    p.add_argument("--name", default=None, help="run name (default: timestamped)")
    p.add_argument("--use-gpu", action="store_true")
    p.add_argument("--report-every", type=int, default=8)
    p.add_argument("--checkpoint-every", type=int, default=None, help="steps between checkpoints")
    p.add_argument("--keep", type=int, default=3, help="committed checkpoints to keep")
    p.add_argument("--sync-save", action="store_true", help="write checkpoints on the loop")
    p.add_argument("--width", type=int, default=64, help="units of the first hidden layer")
    p.add_argument("--max-failures", type=int, default=None, help="0: none, -1: no limit")
    p.add_argument("--hang-timeout", type=float, default=120.0, help="watchdog, seconds")
    p.add_argument("--count-examples", action="store_true", help="count each example's uses")
    p.add_argument(
        "--no-emergency-checkpoint",
        action="store_true",
        help="restart from the last committed checkpoint, not the survivors' last step",
    )
    p.add_argument(
        "--emergency-every",
        type=int,
        default=None,
        help="copy the state for emergency checkpoints every N steps (default: measured)",
    )
    p.add_argument("--placement-timeout", type=float, default=120.0, help="seconds")
    p.add_argument("--step-sleep", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--slow-while", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    t0 = time.monotonic()
    connected_before = ray.is_initialized()
    workers = args.workers if args.min_workers is None else (args.min_workers, args.workers)
    trainer = raytf.Trainer(
        train_loop,
        train_loop_config={
            "steps": args.steps,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "seed": args.seed,
            "report_every": args.report_every,
            "step_sleep": args.step_sleep,
            "slow_while": args.slow_while,
            "count_examples": args.count_examples,
            "width": args.width,
        },
        scaling_config=raytf.ScalingConfig(
            num_workers=workers,
            use_gpu=args.use_gpu,
            elastic_wait_s=args.elastic_wait,
            global_batch_size=args.batch_size,
        ),
        run_config=raytf.RunConfig(
            name=args.name,
            storage_path=args.storage,
            placement_timeout_s=args.placement_timeout,
            checkpoint_config=raytf.CheckpointConfig(
                num_to_keep=args.keep,
                checkpoint_every_steps=args.checkpoint_every,
                async_save=not args.sync_save,
            ),
            failure_config=raytf.FailureConfig(
                max_failures=args.max_failures,
                hang_timeout_s=args.hang_timeout,
                emergency_checkpoint=not args.no_emergency_checkpoint,
                emergency_every_steps=args.emergency_every,
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
