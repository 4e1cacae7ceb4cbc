"""Global batch semantics: the user states the global batch, raytf derives the rest.

Pure arithmetic, shared by the Keras loop and unit tests. Losses are averaged
over the *global* batch (``tf.nn.compute_average_loss``, or Keras's own
``compute_loss`` which divides by the replicas in sync) so that summing the
replicas' gradients gives the gradient of the global mean loss, whatever the
number of workers.
"""

from __future__ import annotations

import numbers

from raytf.errors import ConfigError


def per_replica_batch(global_batch_size: int, num_replicas: int, where: str = "") -> int:
    """The batch each replica sees; an error if the global batch does not split evenly.

    ``where`` names what asked (a dataset), for the message.
    """
    g = global_batch_size
    if isinstance(g, bool) or not isinstance(g, numbers.Integral) or g < 1:
        raise ConfigError(f"{where}global_batch_size = {g!r}: must be a positive int")
    global_batch_size = int(g)
    if global_batch_size % num_replicas:
        lower = global_batch_size - global_batch_size % num_replicas
        upper = lower + num_replicas
        choices = f"{lower} or {upper}" if lower else f"{upper}"
        raise ConfigError(
            f"{where}global_batch_size = {global_batch_size} does not divide over {num_replicas} "
            f"replicas in sync (workers x devices per worker): every replica must get the same "
            f"batch. Use a multiple of {num_replicas}, e.g. {choices}."
        )
    return global_batch_size // num_replicas


def steps_per_epoch_from_shards(batches_per_worker: list[int], replicas_per_worker: int) -> int:
    """Steps in one epoch when each worker's pipeline yields ``batches_per_worker[i]`` batches.

    Every worker must take the same number of steps (a step is a collective), so
    uneven shards are an error here instead of a hang at the end of the epoch.
    """
    low, high = min(batches_per_worker), max(batches_per_worker)
    if low != high:
        raise ConfigError(
            f"the workers' input shards are uneven ({low} to {high} per-replica batches "
            "per epoch): a worker that runs out first would leave the others waiting in a "
            "collective. Shard evenly and batch with drop_remainder=True, or pass steps_per_epoch."
        )
    steps = low // replicas_per_worker
    if steps < 1:
        raise ConfigError(
            f"each worker's input shard holds {low} per-replica batch(es), fewer than one step "
            f"needs ({replicas_per_worker}); the data set is smaller than one global batch"
        )
    return steps
