"""Ray Train's ``get_dataset_shard`` result on raytf: Ray's ``DataIterator`` interface over
raytf's shard.

A Ray Train loop reads its shard with ``shard.to_tf(feature_columns,
label_columns, batch_size=B)``, ``B`` rows per *worker* (Ray's meaning), and
passes the dataset to Keras's ``fit``: MWMS splits each worker's batch over
its local replicas and does not shard it again (auto-sharding off). raytf's
own ``DataShard.to_tf(global_batch_size=...)`` gives per-replica batches for
``distribute_datasets_from_function``; this view gives Ray's, from the same
shard, so the driver still sees each epoch's batch count per rank (an empty or
uneven shard is a clear error, not a hang). Ray's other ``DataIterator``
methods (``iter_batches``, ``iter_tf_batches``, ``iter_rows``, ``schema``,
...) are the shard's own Ray iterator's.
"""

from __future__ import annotations

from typing import Any

from raytf.errors import ConfigError

_TYPE_SPECS = ("feature_type_spec", "label_type_spec", "additional_type_spec")


class RayDataIterator:
    """This worker's shard of a trainer dataset, with Ray's ``DataIterator`` methods."""

    def __init__(self, shard: Any):
        self._shard = shard

    def to_tf(
        self,
        feature_columns: str | list[str],
        label_columns: str | list[str] | None = None,
        additional_columns: str | list[str] | None = None,
        prefetch_batches: int = 1,
        batch_size: int = 1,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
        **type_specs: Any,
    ):
        """Ray's ``DataIterator.to_tf``: ``batch_size`` rows per worker; one iteration of
        the dataset is one epoch of the shard."""
        unknown = sorted(set(type_specs) - set(_TYPE_SPECS))
        if unknown:
            raise TypeError(f"to_tf() got unexpected keyword arguments {unknown}")
        if any(v is not None for v in type_specs.values()):
            raise ConfigError(
                "to_tf(*_type_spec=...) is not supported: raytf reads the types from the "
                "dataset's schema; cast the columns in the dataset (Dataset.map_batches) instead"
            )
        if int(batch_size) < 1:
            raise ConfigError(f"to_tf(batch_size={batch_size}): must be at least 1 row per worker")
        return self._shard.batches(
            (feature_columns, label_columns, additional_columns),
            int(batch_size),
            drop_last=drop_last,
            prefetch_batches=prefetch_batches,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
        )

    def __getattr__(self, name: str) -> Any:
        # Ray's other DataIterator methods: the shard's Ray iterator answers them.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._shard.iterator, name)
