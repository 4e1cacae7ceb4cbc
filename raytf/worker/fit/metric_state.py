"""Keras metric accumulators in a checkpoint, restored bit for bit.

Keras 3 creates a metric's variables synchronized on read with SUM
aggregation: under MWMS each replica keeps its own partial ``total`` and
``count``, and a read in cross-replica context all-reduces them. Saving that
read and assigning it back (what raytf did first) keeps the sum, but TF's
cross-replica assign of a SUM variable gives every replica ``sum / N``. The
epoch then goes on adding each replica's batches to another partial sum than
the uninterrupted run did, and float addition is not associative: the
epoch's loss came out one float32 ULP off (0.8536580204963684 against
0.8536579608917236 on the CI machine), depending on the step resumed at.

So a checkpoint keeps every replica's partials: one all-reduce gathers them
(each replica adds its values into its own row of zeros, exact in float64),
in place of the one read per variable it replaces. Every rank's state file
then holds all of them, so a restore puts each replica's partials back where
they were even on a rank whose own file is missing (a rank that died before an
emergency checkpoint): the updates that follow add in the uninterrupted order.
A group of another shape (a resize) gets the sum split over its replicas: the
total is kept, the last bits are not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FORMAT = 2  # 1 (a bare list of global values): checkpoints written before partials were kept


class MetricState:
    """Capture and restore one model's metric variables under ``strategy``."""

    def __init__(self, strategy: Any, variables: list, first_replica: int = 0):
        """``first_replica``: the global id of this process's first replica (under MWMS,
        rank x local replicas)."""
        self.strategy = strategy
        self.variables = list(variables)
        self.replicas = int(strategy.num_replicas_in_sync)
        self.first_replica = first_replica
        self._gather = None

    def _components(self, variable: Any) -> tuple:
        """This process's replicas' own copies of a (Keras) variable, in replica order."""
        value = getattr(variable, "value", variable)  # keras.Variable -> its tf variable
        return tuple(self.strategy.experimental_local_results(value))

    def _make_gather(self):
        import tensorflow as tf

        strategy, variables, replicas = self.strategy, self.variables, self.replicas

        def flat(variable):  # read in replica context: this replica's own partial
            return tf.reshape(tf.cast(tf.convert_to_tensor(variable.value), tf.float64), [-1])

        def gather():
            ctx = tf.distribute.get_replica_context()
            mine = tf.concat([flat(v) for v in variables], axis=0)
            row = tf.one_hot(ctx.replica_id_in_sync_group, replicas, dtype=tf.float64)
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, row[:, None] * mine[None, :])

        return tf.function(lambda: strategy.run(gather))

    def capture(self) -> dict:
        """A JSON-able record of every replica's partials; every rank calls it at the same
        step (one all-reduce)."""
        if self._gather is None:
            self._gather = self._make_gather()
        local = self.strategy.experimental_local_results(self._gather())[0]
        return {
            "format": FORMAT,
            "replicas": self.replicas,
            "partials": np.asarray(local.numpy()).tolist(),  # [replica][flattened values]
        }

    def restore(self, saved: Any) -> bool:
        """Put ``saved`` back; True when each replica got its own partials back exactly.

        Every rank decides alike: the partials are the same in every rank's file."""
        if isinstance(saved, dict) and saved.get("format") == FORMAT:
            partials = np.asarray(saved["partials"], dtype=np.float64)
            if saved.get("replicas") == self.replicas:
                first = self.first_replica
                for offset, (variable, shape) in self._layout():
                    size = int(np.prod(shape))
                    for j, component in enumerate(self._components(variable)):
                        value = partials[first + j, offset : offset + size].reshape(shape)
                        component.assign(value.astype(component.dtype.as_numpy_dtype))
                return True
            sums = partials.sum(axis=0)  # another group shape: the global values, split
            values = [sums[o : o + int(np.prod(s))].reshape(s) for o, (_, s) in self._layout()]
        else:
            values = saved  # format 1: the global values themselves
        for variable, value in zip(self.variables, values, strict=True):
            variable.assign(np.asarray(value, dtype=variable.dtype))
        return False

    def _layout(self):
        """(offset in the flattened row, (variable, shape)) for each variable."""
        offset = 0
        for variable in self.variables:
            shape = tuple(variable.shape)
            yield offset, (variable, shape)
            offset += int(np.prod(shape))
