"""``raytf.Trainer``: the user's entry point, shaped like Ray Train's trainers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raytf.config import RunConfig, ScalingConfig
from raytf.data.feed import check_datasets
from raytf.driver.launch import RunSpec, runner_for
from raytf.errors import ConfigError
from raytf.group.elastic import check_batch_splits
from raytf.result import Result


class Trainer:
    """Runs ``train_loop_per_worker`` on every worker of one MWMS group.

    ``train_loop_per_worker`` takes the config dict (or nothing) and runs on
    each worker after the strategy exists; it reaches the strategy, its rank
    and ``report`` through ``raytf.get_context()``. ``datasets`` maps names to
    Ray Data datasets: each worker reads its equal shard with
    ``raytf.get_dataset_shard(name)``. ``ScalingConfig(num_workers=0)`` runs the
    loop in this process instead (``raytf.local_mode``).

    Args:
        train_loop_per_worker: The function each worker runs, as ``fn(config)`` or
            ``fn()``. Must be importable on the workers (its module shipped or installed).
        train_loop_config: Passed to ``train_loop_per_worker`` and seen as
            ``get_context().config``. Default None: an empty dict.
        scaling_config: Workers and their resources. Default None: ``ScalingConfig()``,
            one CPU worker.
        run_config: Run name, storage, checkpoints, failure handling, callbacks. Default
            None: ``RunConfig()``, a new name under ``RAYTF_STORAGE_PATH``.
        datasets: Names to ``ray.data.Dataset``; each worker reads an equal shard.
            Default None: no Ray Data input.

    Raises:
        ConfigError: An argument has the wrong type, a ``datasets`` key or value is not a
            name and a Ray Data dataset, or ``ScalingConfig.global_batch_size`` splits over
            none of the world sizes ``num_workers`` allows.
    """

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        train_loop_config: dict[str, Any] | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        datasets: dict[str, Any] | None = None,
    ):
        if not callable(train_loop_per_worker):
            raise ConfigError(
                f"train_loop_per_worker = {train_loop_per_worker!r}: must be a function"
            )
        if train_loop_config is not None and not isinstance(train_loop_config, dict):
            raise ConfigError(f"train_loop_config = {train_loop_config!r}: must be a dict or None")
        if scaling_config is not None and not isinstance(scaling_config, ScalingConfig):
            raise ConfigError(f"scaling_config = {scaling_config!r}: must be a ScalingConfig")
        if run_config is not None and not isinstance(run_config, RunConfig):
            raise ConfigError(f"run_config = {run_config!r}: must be a RunConfig")
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = dict(train_loop_config or {})
        self.scaling_config = scaling_config or ScalingConfig()
        self.run_config = run_config or RunConfig()
        self.datasets = check_datasets(datasets)
        if not self.scaling_config.is_local:
            check_batch_splits(self.scaling_config)

    def run_spec(self) -> RunSpec:
        """What this trainer runs, as the driver takes it."""
        return RunSpec(
            fn=self.train_loop_per_worker,
            config=self.train_loop_config,
            scaling=self.scaling_config,
            run_config=self.run_config,
            datasets=self.datasets,
        )

    def fit(self) -> Result:
        """Train to the end and return the Result; raise TrainingFailedError otherwise.

        Starts (or joins) Ray, places the group, runs the loop on every worker and
        restarts it from the latest committed checkpoint after the failures
        ``FailureConfig`` allows. Blocks until the run ends.

        Returns:
            The run's ``Result``: rank 0's metrics, the latest checkpoint, every rank's
                return value, the failures survived. A run stopped by SIGTERM or SIGINT
                re-raises the signal (``SystemExit(143)`` or ``KeyboardInterrupt``) after its
                last checkpoint instead.

        Raises:
            ConfigError: Before any worker starts: the storage path cannot be written,
                a local run directory is not shared by every node, the workers leave no
                CPU for Ray Data's tasks, or ``datasets`` with ``num_workers=0``.
            RunDirInUseError: Another live driver holds this run directory's lease.
            UnsatisfiableResourcesError: No node of the cluster can ever hold a worker.
            DataShardError: A dataset is too small to give every worker a batch.
            TrainingFailedError: The run ended in failure. Its ``causes`` (first cause
                first, also ``__cause__``) are raytf's errors: ``WorkerError`` (user code
                raised), ``WorkerDiedError``, ``WorkerHangError``,
                ``PlacementTimeoutError``, ``WorkerSetupError``, ``CheckpointMismatchError``,
                ``CheckpointStorageError``, ``StorageUnavailableError``, ``LeaseLostError``,
                ``DataShardError``, ``DependencyError``; its ``result`` holds the partial
                ``Result``. Each is importable from ``raytf``.
        """
        return runner_for(self.run_spec()).run()

    def as_trainable(self):
        """A Ray Tune trainable: one trial, one run of this trainer with the trial's config
        merged over ``train_loop_config`` (see ``raytf.integrations.tune``).

        Returns:
            (type[ray.tune.Trainable]): A subclass for ``Tuner(trainable, param_space=...)``.

        Raises:
            ConfigError: ``ScalingConfig.num_workers`` is elastic or 0: a trial holds a
                fixed reservation of worker processes.
        """
        from raytf.integrations.tune import trainable

        return trainable(self.run_spec())
