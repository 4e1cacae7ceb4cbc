"""Ray Data input, driver side: split each dataset per attempt, keep the shards in step.

Every attempt splits every dataset again with ``streaming_split(n,
equal=True)``: a restart may have another world size, and a split's
coordinator belongs to the attempt that used it. Rows a split drops to make
the shards equal, and rows short of a full batch, are said once when the
row count is known without running the pipeline.

``ShardCheck`` is pure logic (unit-tested): it compares the batch counts the
ranks' shards report at each epoch end and names the first mismatch.
"""

from __future__ import annotations

import threading
from typing import Any

from raytf.errors import ConfigError, DataShardError
from raytf.messages import ShardEpoch


def check_datasets(datasets: Any) -> dict[str, Any]:
    """``datasets`` must map names to Ray Data datasets; returns a plain dict."""
    if datasets is None:
        return {}
    if not isinstance(datasets, dict):
        raise ConfigError(
            f"datasets = {datasets!r}: must be a dict of name to ray.data.Dataset, "
            'e.g. {"train": ds}'
        )
    from ray.data import Dataset

    for name, ds in datasets.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"datasets has a key {name!r}: names are non-empty strings")
        if not isinstance(ds, Dataset):
            raise ConfigError(
                f"datasets[{name!r}] is a {type(ds).__name__}: must be a ray.data.Dataset "
                "(ray.data.from_numpy, read_parquet, read_csv, ...)"
            )
    return dict(datasets)


def known_rows(ds: Any) -> int | None:
    """The row count when Ray knows it without running the pipeline (file metadata, range)."""
    try:
        return ds._meta_count()  # Ray's own cheap count; a filter or flat_map makes it None
    except Exception:  # noqa: BLE001 - unknown is an answer
        return None


def plan_rows(name: str, rows: int, workers: int, global_batch: int | None) -> str | None:
    """Refuse a dataset that gives no full batch; describe what an epoch drops. Pure."""
    per_shard = rows // workers
    if per_shard == 0:
        raise DataShardError(
            f"dataset {name!r} has {rows} rows: fewer than the {workers} workers, "
            "so every shard would be empty"
        )
    if global_batch is None:
        dropped = rows - per_shard * workers
        return f"dataset {name!r}: {rows} rows, {dropped} dropped per epoch" if dropped else None
    per_worker_batch = global_batch // workers
    steps = per_shard // per_worker_batch if per_worker_batch else 0
    if steps == 0:
        raise DataShardError(
            f"dataset {name!r} has {rows} rows: fewer than one global batch of "
            f"{global_batch} ({per_worker_batch} per worker x {workers} workers), "
            "so no step could run"
        )
    dropped = rows - steps * global_batch
    tail = f", {dropped} rows dropped per epoch (full batches only)" if dropped else ""
    return f"dataset {name!r}: {rows} rows, {steps} steps of {global_batch} per epoch{tail}"


def check_room(names: list[str], worker_cpus: float, cluster_cpus: float) -> None:
    """Ray Data's tasks need CPUs the workers do not hold, or the input never comes. Pure."""
    if cluster_cpus - worker_cpus < 1:
        raise ConfigError(
            f"datasets {names} need at least 1 CPU for Ray Data's tasks, and the workers "
            f"hold {worker_cpus:g} of the cluster's {cluster_cpus:g} CPUs: the input would "
            "never come. Add a node, give the workers fewer CPUs "
            "(ScalingConfig.resources_per_worker), or start Ray with more logical CPUs"
        )


class DataFeed:
    """The run's datasets: checked up front, split again for every attempt, each
    attempt's shards checked for lockstep from what the workers' polls carry."""

    def __init__(self, datasets: dict[str, Any], global_batch: int | None):
        self.datasets = datasets
        self.global_batch = global_batch
        self.error: DataShardError | None = None  # the first shard mismatch: ends the run
        self._check: ShardCheck | None = None
        self._said: set[tuple[str, int]] = set()
        self._rows: dict[str, int | None] | None = None  # known row counts, asked once
        self._schemas: dict[str, Any] = {}
        self._schema_thread: threading.Thread | None = None

    def fetch_schemas(self) -> None:
        """Start fetching each dataset's schema (a short pipeline run) while workers start.

        Workers need it to type their tf.data input; fetched here once, a restart
        does not pay for it again.
        """
        if self.datasets and self._schema_thread is None:
            self._schema_thread = threading.Thread(
                target=lambda: self._schemas.update(
                    {name: ds.schema() for name, ds in self.datasets.items()}
                ),
                name="raytf-schemas",
                daemon=True,
            )
            self._schema_thread.start()

    def check(self, workers: int, say) -> None:
        """Refuse, before any process starts, a dataset of known size that gives no step."""
        if self._rows is None:
            self._rows = {name: known_rows(ds) for name, ds in self.datasets.items()}
        for name, rows in self._rows.items():
            if rows is not None:
                line = plan_rows(name, rows, workers, self.global_batch)
                if line and (name, workers) not in self._said:
                    self._said.add((name, workers))
                    say(line)

    def start_attempt(self, workers: int, say) -> list[dict[str, Any]] | None:
        """Per rank, name -> {iterator: its DataIterator, schema} (None without datasets).

        Splits every dataset for this attempt's world size; the shard check starts over.
        """
        if not self.datasets:
            return None
        self._check = ShardCheck(workers)
        self.check(workers, say)
        self.fetch_schemas()
        self._schema_thread.join()
        shards: list[dict[str, Any]] = [{} for _ in range(workers)]
        for name, ds in self.datasets.items():
            for rank, it in enumerate(ds.streaming_split(workers, equal=True)):
                shards[rank][name] = {"iterator": it, "schema": self._schemas.get(name)}
        return shards

    def on_poll(self, rank: int, epochs: list[ShardEpoch], positions: dict) -> None:
        """What a rank's shards reported; the first mismatch is kept in ``error``."""
        if self._check is not None and self.error is None and (epochs or positions):
            self.error = self._check.add(rank, epochs, positions)


class ShardCheck:
    """Do all ranks' shards give the same number of batches per epoch? One per attempt."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.ended: dict[tuple[str, int], dict[int, ShardEpoch]] = {}
        self.live: dict[int, dict[str, tuple[int, int]]] = {}

    def add(
        self, rank: int, epochs: list[ShardEpoch], live: dict[str, tuple[int, int]]
    ) -> DataShardError | None:
        self.live[rank] = dict(live)
        for e in epochs:
            if e.batches == 0:
                return DataShardError(
                    f"dataset {e.dataset!r}: rank {e.rank}'s shard gave no full batch of "
                    f"{e.batch_size} rows in epoch {e.epoch} ({e.rows} rows read): the "
                    "dataset is smaller than one global batch, or its shards are empty"
                )
            self.ended.setdefault((e.dataset, e.epoch), {})[e.rank] = e
        return self._mismatch()

    def _mismatch(self) -> DataShardError | None:
        for (name, epoch), ended in list(self.ended.items()):
            ref = ended[min(ended)]
            for rank, e in ended.items():
                if e.batches != ref.batches:
                    return self._uneven(name, ref, rank, e.batches)
            for rank, pos in self.live.items():
                if rank not in ended and pos.get(name, (-1, 0))[0] == epoch:
                    if pos[name][1] > ref.batches:
                        return self._uneven(name, ref, rank, pos[name][1])
            if len(ended) == self.world_size:
                del self.ended[(name, epoch)]  # agreed: nothing more to compare
        return None

    @staticmethod
    def _uneven(name: str, ref: ShardEpoch, rank: int, batches: int) -> DataShardError:
        return DataShardError(
            f"dataset {name!r}, epoch {ref.epoch}: rank {ref.rank}'s shard ended after "
            f"{ref.batches} batches of {ref.batch_size} rows while rank {rank}'s gave "
            f"{batches}: every rank must read the same number of batches per epoch "
            "(the same global batch size on every rank, shards split equally); "
            "ranks out of step would wait on each other's collectives"
        )
