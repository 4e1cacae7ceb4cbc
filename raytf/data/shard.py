"""A worker's share of a Ray Data dataset, read as a ``tf.data.Dataset`` of per-replica batches.

The driver splits each dataset once per attempt with Ray Data's streaming
split (``equal=True``: every shard gets the same number of rows, so every
rank runs the same number of steps). ``to_tf`` turns the shard into a
``tf.data.Dataset`` whose elements are per-replica batches (the global batch
divided by the replicas in sync), ready for
``strategy.distribute_datasets_from_function``. Iterating it once is one
epoch of the shard; iterating it again starts the next epoch (Ray Data runs
the pipeline again, preprocessing included, with an implicit barrier across
the shards).

Each epoch's batch count goes to the driver, which fails the run with a clear
error when a shard is empty or when ranks read different numbers of batches:
MWMS steps are collectives, and ranks out of step would otherwise wait on
each other (or, with TF's partial-batch handling, train on padding).

Resume happens at epoch boundaries: a shard has no position to save
(a streaming split hands blocks to whichever rank asks first, so the same
epoch read again splits differently). After a recovery the loop starts
the epoch it was in again from its beginning; checkpoints taken at epoch
ends make a recovery exact (see docs/data_and_tune.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raytf.data.batching import per_replica_batch
from raytf.messages import ShardEpoch


def _columns(cols: str | list[str] | None) -> list[str]:
    if cols is None:
        return []
    return [cols] if isinstance(cols, str) else list(cols)


def _pick(batch: dict, cols: str | list[str]) -> Any:
    return batch[cols] if isinstance(cols, str) else {c: batch[c] for c in cols}


class DataShard:
    """This rank's shard of one dataset. Get it with ``raytf.get_dataset_shard(name)``.

    Args:
        name: The dataset's key in the trainer's ``datasets``.
        iterator: raytf's: Ray Data's ``DataIterator`` of this shard.
        schema: raytf's: the dataset's schema, fetched once by the driver. Default None.
        rank: raytf's: this worker's rank.
        num_replicas: raytf's: replicas in sync over the group.
        on_epoch: raytf's: told each epoch's batch count, for the driver's lockstep check.
        position: raytf's: where each dataset's reading is, for the driver's poll.
    """

    def __init__(
        self,
        name: str,
        iterator: Any,
        *,
        schema: Any = None,
        rank: int,
        num_replicas: int,
        on_epoch: Callable[[ShardEpoch], None],
        position: dict[str, tuple[int, int]],
    ):
        self.name = name
        self._iterator = iterator
        self._schema = schema  # fetched once by the driver: asking the split costs a pipeline run
        self._rank = rank
        self._num_replicas = num_replicas
        self._on_epoch = on_epoch
        self._position = position  # dataset -> (epoch, batches so far): read by the driver's poll
        self._epoch = -1

    @property
    def iterator(self) -> Any:
        """Ray Data's ``DataIterator`` of this shard, for reading it without TensorFlow."""
        return self._iterator

    def per_replica_batch(self, global_batch_size: int) -> int:
        """Rows per element of ``to_tf``'s dataset: the global batch over the replicas.

        Args:
            global_batch_size: Examples per step over the whole group.

        Returns:
            ``global_batch_size // num_replicas``.

        Raises:
            ConfigError: ``global_batch_size`` is not a positive int or does not divide
                by the replicas in sync (the message names the nearest that do).
        """
        return per_replica_batch(global_batch_size, self._num_replicas, f"dataset {self.name!r}: ")

    def to_tf(
        self,
        feature_columns: str | list[str],
        label_columns: str | list[str] | None = None,
        *,
        global_batch_size: int,
        additional_columns: str | list[str] | None = None,
        drop_last: bool = True,
        prefetch_batches: int = 1,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
    ):
        """A ``tf.data.Dataset`` of this shard's per-replica batches; one iteration, one epoch.

        Elements are ``features``, ``(features, labels)`` or ``(features, labels,
        additional)``; a column list gives a dict of tensors. ``drop_last`` (the
        default) keeps every batch full, so the batch shape is static and every
        rank's step count equal. Columns must have a fixed shape per row (for
        ragged columns use Ray's own ``iterator.to_tf``).

        Args:
            feature_columns: A column (a tensor per element) or a list of them (a dict).
            label_columns: The same, for labels. Default None: features only.
            global_batch_size: Examples per step over the whole group; each element holds
                ``global_batch_size / replicas`` rows.
            additional_columns: A third group, e.g. sample weights; needs
                ``label_columns``. Default None.
            drop_last: Drop an epoch's last partial batch. Default True.
            prefetch_batches: Batches Ray Data prepares ahead. Default 1.
            local_shuffle_buffer_size: Rows in Ray Data's local shuffle buffer. Default
                None: no shuffle.
            local_shuffle_seed: That shuffle's seed. Default None: unseeded.

        Returns:
            (tf.data.Dataset): TF's auto-sharding off: the rows are this rank's already.

        Raises:
            ConfigError: ``global_batch_size`` does not divide by the replicas in sync.
            ValueError: A column is missing or ragged, or ``additional_columns`` is given
                without ``label_columns``.
        """
        return self.batches(
            (feature_columns, label_columns, additional_columns),
            self.per_replica_batch(global_batch_size),
            drop_last=drop_last,
            prefetch_batches=prefetch_batches,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
        )

    def batches(
        self,
        columns: tuple,
        per_replica: int,
        *,
        drop_last: bool,
        prefetch_batches: int = 1,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
    ):
        """``to_tf``'s dataset with its batch size given as rows per element (Ray Train's
        ``to_tf(batch_size=...)`` means rows per worker: ``raytf.integrations``).

        Args:
            columns: ``(feature_columns, label_columns, additional_columns)``.
            per_replica: Rows per element.
            drop_last: Drop an epoch's last partial batch.
            prefetch_batches: Batches Ray Data prepares ahead. Default 1.
            local_shuffle_buffer_size: Rows in the local shuffle buffer. Default None.
            local_shuffle_seed: That shuffle's seed. Default None.

        Returns:
            (tf.data.Dataset): As ``to_tf``'s.

        Raises:
            ValueError: As ``to_tf``'s.
        """
        import tensorflow as tf

        feature_columns, label_columns, additional_columns = columns
        groups = [c for c in (feature_columns, label_columns, additional_columns) if c is not None]
        if label_columns is None and additional_columns is not None:
            raise ValueError("additional_columns needs label_columns")
        spec = self._spec(groups, per_replica if drop_last else None)
        single = len(groups) == 1

        def generator():
            self._epoch += 1
            epoch, batches, rows = self._epoch, 0, 0
            self._position[self.name] = (epoch, 0)
            for batch in self._iterator.iter_batches(
                batch_size=per_replica,
                batch_format="numpy",
                drop_last=drop_last,
                prefetch_batches=prefetch_batches,
                local_shuffle_buffer_size=local_shuffle_buffer_size,
                local_shuffle_seed=local_shuffle_seed,
            ):
                batches += 1
                rows += len(next(iter(batch.values()))) if batch else 0
                self._position[self.name] = (epoch, batches)
                parts = tuple(_pick(batch, c) for c in groups)
                yield parts[0] if single else parts
            self._on_epoch(ShardEpoch(self._rank, self.name, epoch, batches, rows, per_replica))

        ds = tf.data.Dataset.from_generator(generator, output_signature=spec[0] if single else spec)
        options = tf.data.Options()
        # Already sharded by Ray Data: TF must not shard it again.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        # Freeing an iterator waits for tf.data's autotuner thread, up to tens of seconds
        # at an epoch's end (docs/benchmarks.md); Ray Data does the prefetching here.
        options.autotune.enabled = False
        return ds.with_options(options)

    def _spec(self, groups: list, batch: int | None) -> tuple:
        """Type specs from the dataset's schema (Ray's inference), batch dimension fixed."""
        import tensorflow as tf

        schema = self._schema if self._schema is not None else self._iterator.schema()
        names = list(schema.names)
        missing = [c for group in groups for c in _columns(group) if c not in names]
        if missing:
            raise ValueError(
                f"dataset {self.name!r} has no column(s) {missing}; its columns are {names}"
            )
        try:  # the inference Ray's own to_tf uses
            from ray.data._internal.utils.tensorflow_utils import get_type_spec
        except ImportError:  # moved in another Ray: infer through the public to_tf
            probe = self._iterator.to_tf(groups[0], groups[-1])
            inferred = [
                probe.element_spec[0],
                *(self._iterator.to_tf(g, g).element_spec[0] for g in groups[1:]),
            ]
        else:
            inferred = [get_type_spec(schema, columns=g) for g in groups]

        def fix(spec):
            if isinstance(spec, dict):
                return {k: fix(v) for k, v in spec.items()}
            if isinstance(spec, tf.TensorSpec):
                return tf.TensorSpec((batch, *spec.shape[1:]), spec.dtype, spec.name)
            raise ValueError(
                f"dataset {self.name!r}: a column has ragged rows ({spec}); to_tf needs a "
                "fixed shape per row (pad it in a map, or use shard.iterator.to_tf)"
            )

        return tuple(fix(s) for s in inferred)
