"""The benchmark's training loop, identical in every way it runs.

The loop is the examples' custom MWMS loop: Keras 3 layers and optimizer,
``strategy.run`` inside one ``tf.function`` per step, input a pure function of
the global step (so a resumed run reads exactly what it would have). What
differs between raytf, hand-launched MWMS and Ray Train is only the ``host``:
how the strategy was made, how a checkpoint is restored and saved, and how
progress is reported. The loop writes its own trace (see ``trace.py``).

Workloads:
- ``mlp``: the synthetic classifier of ``jobs/train_synthetic.py`` (32
  features, two hidden layers of 64, 4 classes).
- ``conv``: a small convolutional classifier on 32x32x3 synthetic images
  (three conv layers, global pooling): more arithmetic per step and per byte
  of gradient, closer to real use.
"""

from __future__ import annotations

from typing import Any, Protocol

from raytf.bench.trace import Trace

WORKLOADS = ("mlp", "conv")
IMAGE = (32, 32, 3)
CONV_CLASSES = 10


class Host(Protocol):
    """What the loop needs from the layer around it."""

    strategy: Any
    rank: int

    def restore(self, tracked: dict) -> int: ...  # the step to resume after (0: fresh)

    def step_end(self, step: int) -> None: ...  # a checkpoint may be taken here

    def report(self, step: int, loss: float) -> None: ...


def _mlp(keras):
    from raytf.data.synthetic import NUM_CLASSES, NUM_FEATURES

    return keras.Sequential(
        [
            keras.Input((NUM_FEATURES,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(NUM_CLASSES),
        ]
    )


def _conv(keras):
    return keras.Sequential(
        [
            keras.Input(IMAGE),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(64, 3, strides=2, padding="same", activation="relu"),
            keras.layers.Conv2D(64, 3, strides=2, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(CONV_CLASSES),
        ]
    )


def _mlp_batches(tf, seed: int, per_replica: int, global_batch: int):
    """Rows ``[s*B, (s+1)*B)`` of the examples' data set at step s, this replica's slice."""
    from raytf.data.synthetic import NUM_EXAMPLES, make_dataset

    x_np, y_np = make_dataset(seed)
    x_all, y_all = tf.constant(x_np), tf.constant(y_np)

    def batch(step, replica):
        begin = step * global_batch + replica * per_replica
        idx = (begin + tf.range(per_replica, dtype=tf.int64)) % NUM_EXAMPLES
        return tf.gather(x_all, idx), tf.gather(y_all, idx)

    return batch


def _conv_batches(tf, seed: int, per_replica: int, global_batch: int):
    """Images generated from (seed, step, replica): class c is a noisy copy of template c."""
    templates = tf.random.stateless_normal((CONV_CLASSES, *IMAGE), seed=[seed, 7])

    def batch(step, replica):
        s = tf.stack([tf.cast(step, tf.int32), tf.cast(replica, tf.int32)])
        y = tf.random.stateless_uniform(
            (per_replica,), seed=s + [seed, 1], maxval=CONV_CLASSES, dtype=tf.int32
        )
        noise = tf.random.stateless_normal((per_replica, *IMAGE), seed=s + [seed, 2])
        return tf.gather(templates, y) * 0.5 + noise, y

    return batch


def no_autotune(tf):
    """tf.data options without the autotuner, whose thread makes an iterator's end slow.

    Deleting an iterator waits for tf.data's autotuning thread to wake, and its
    sleeps grow to a minute: measured here, a loop's return (its iterator
    freed) took up to 5 s after 6 s of training and 53-85 s after several
    minutes. This input is fixed (no AUTOTUNE parallelism), so nothing is lost.
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def train(host: Host, config: dict, trace: Trace) -> dict:
    """Run ``config['steps']`` global steps; returns the final loss and weights digest."""
    import keras
    import tensorflow as tf

    from raytf.digests import weights_digest

    strategy = host.strategy
    workload = config.get("workload", "mlp")
    global_batch = int(config["batch_size"])
    replicas = strategy.num_replicas_in_sync
    if global_batch % replicas:
        raise ValueError(f"global batch {global_batch} does not divide over {replicas} replicas")
    per_replica = global_batch // replicas
    steps = int(config["steps"])
    seed = int(config.get("seed", 0))
    keras.utils.set_random_seed(seed)
    make_batches = {"mlp": _mlp_batches, "conv": _conv_batches}[workload]
    batch_at = make_batches(tf, seed, per_replica, global_batch)

    def dataset_fn(first_step: int):
        def make(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
            k = replicas // ctx.num_input_pipelines
            first_replica = ctx.input_pipeline_id * k
            ds = tf.data.Dataset.range(first_step * k, steps * k)
            ds = ds.map(lambda i: batch_at(i // k, first_replica + i % k)).prefetch(2)
            return ds.with_options(no_autotune(tf))

        return make

    with strategy.scope():
        model = {"mlp": _mlp, "conv": _conv}[workload](keras)
        optimizer = keras.optimizers.Adam(learning_rate=float(config.get("lr", 1e-3)))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    start = host.restore({"model": model, "optimizer": optimizer})
    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn(start)))

    def step_fn(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(it):
        loss = strategy.run(step_fn, args=next(it))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)

    report_every = int(config.get("report_every", 8))
    trace.started(start)
    loss = None
    for step in range(start + 1, steps + 1):
        loss = train_step(iterator)
        host.step_end(step)
        trace.step(step)
        if step % report_every == 0 or step == steps:
            host.report(step, float(loss))
    final = float(loss) if loss is not None else float("nan")
    out = {"loss": final, "weights_digest": weights_digest(model.get_weights()), "steps": steps}
    trace.finished(out)
    return out
