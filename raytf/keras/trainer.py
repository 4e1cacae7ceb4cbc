"""``raytf.KerasTrainer``: Keras 3 compile-and-fit across a cluster.

The single-machine idiom moves over with few changes::

    # one machine                               # raytf, N workers
    strategy = tf.distribute.MirroredStrategy()  def build_model():
    with strategy.scope():                           model = make_model()
        model = make_model()                         model.compile(...)
        model.compile(...)                           return model
    model.fit(dataset, epochs=5)                 raytf.KerasTrainer(build_model, dataset_fn,
                                                     global_batch_size=64, epochs=5,
                                                     scaling_config=ScalingConfig(num_workers=N),
                                                 ).fit().history

raytf calls ``build_model`` inside ``strategy.scope()`` on every worker and
runs the loop of ``keras_loop``; this module checks the options on the
driver, where a mistake costs nothing, and turns rank 0's epoch reports into
a History-like dict.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from raytf.config import RunConfig, ScalingConfig
from raytf.data.batching import per_replica_batch
from raytf.errors import ConfigError
from raytf.keras.callbacks import check_callbacks
from raytf.keras.loop import FitSpec, run_fit
from raytf.keras.steps import check_step_mode
from raytf.result import Result
from raytf.trainer import Trainer


def check_fit_options(spec: FitSpec, num_replicas: int | None) -> None:
    """Driver-side checks, before any worker starts."""
    for name in ("build_model", "dataset_fn"):
        if not callable(getattr(spec, name)):
            raise ConfigError(f"{name} = {getattr(spec, name)!r}: must be a function")
    if spec.validation_fn is not None and not callable(spec.validation_fn):
        raise ConfigError(f"validation_fn = {spec.validation_fn!r}: must be a function or None")
    per_replica_batch(spec.global_batch_size, num_replicas or 1)
    for name in ("epochs", "report_every"):
        value = getattr(spec, name)
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} = {value!r}: must be a positive int")
    for name in ("steps_per_epoch", "validation_steps"):
        value = getattr(spec, name)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ConfigError(f"{name} = {value!r}: must be a positive int or None")
    check_step_mode(spec.step_mode, spec.steps_per_call)
    if not isinstance(spec.callbacks, (list, tuple)):
        raise ConfigError(f"callbacks = {spec.callbacks!r}: must be a list")
    check_callbacks(list(spec.callbacks))


def known_replicas(scaling: ScalingConfig) -> int | None:
    """Replicas in sync, where the driver can know them: one per worker, or per GPU.

    None for an elastic group: its size is known only once placed (the batch is
    checked against every size it may run at instead).
    """
    if scaling.is_elastic:
        return None
    return scaling.num_workers * scaling.replicas_per_worker


class KerasTrainer:
    """Train a compiled Keras 3 model on ``num_workers`` MWMS workers, like ``model.fit``.

    ``build_model([config])`` builds and compiles the model (called inside
    ``strategy.scope()``). ``dataset_fn(input_context[, config])`` returns this
    worker's ``tf.data.Dataset`` of per-replica batches: shard by
    ``input_context.input_pipeline_id``, batch by
    ``input_context.get_per_replica_batch_size(global_batch_size)`` with
    ``drop_remainder=True``, keep it deterministic (seeded shuffles) so a
    resume can find its place. ``steps_per_epoch`` defaults to one pass over
    the shard. ``validation_fn`` works the same way and gives ``val_*``
    metrics at each epoch end. Metrics are global: every worker's examples.

    Args:
        build_model: ``build_model()`` or ``build_model(config)``: returns the compiled
            Keras 3 model; called on every worker inside ``strategy.scope()``.
        dataset_fn: ``dataset_fn(input_context)`` or ``dataset_fn(input_context, config)``:
            returns this worker's ``tf.data.Dataset`` of per-replica batches.
        global_batch_size: Examples per step over the whole group; must divide by the
            replicas in sync (workers x GPUs per worker, or workers on CPU).
        epochs: Epochs to train. Default 1.
        steps_per_epoch: Steps (global batches) per epoch. Default None: one pass over
            the shard; required for an elastic ``num_workers``.
        validation_fn: Like ``dataset_fn``, for the validation data. Default None: no
            validation.
        validation_steps: Validation batches per epoch end. Default None: one pass.
        callbacks: Keras callbacks: file writers and progress bars run on rank 0 only,
            deciding ones (EarlyStopping, ...) on every rank. Default None: none.
        step_mode: ``"compiled"`` (default, one ``tf.function``), ``"eager"`` (Python
            per step, for ``print`` and debuggers) or ``"xla"`` (``jit_compile``).
        steps_per_call: Steps per call into the graph; checkpoints and reports fall on
            call boundaries. Default 1.
        report_every: Steps between metric reports to the driver. Default 10.
        return_weights: Put rank 0's final weights in ``Result.weights``. Default True.
        train_loop_config: Passed to ``build_model`` and ``dataset_fn`` when they take a
            ``config``. Default None: an empty dict.
        scaling_config: Workers and their resources. Default None: ``ScalingConfig()``.
        run_config: Name, storage, checkpoints, failures. Default None: ``RunConfig()``.

    Raises:
        ConfigError: An option is invalid (a value that is not a function, a count that
            is not a positive int, an unknown ``step_mode``, ``BackupAndRestore`` among
            the callbacks), ``global_batch_size`` does not split over the replicas, or
            ``steps_per_epoch`` is None with an elastic ``num_workers``.
    """

    def __init__(
        self,
        build_model: Callable[..., Any],
        dataset_fn: Callable[..., Any],
        *,
        global_batch_size: int,
        epochs: int = 1,
        steps_per_epoch: int | None = None,
        validation_fn: Callable[..., Any] | None = None,
        validation_steps: int | None = None,
        callbacks: list[Any] | None = None,
        step_mode: str = "compiled",
        steps_per_call: int = 1,
        report_every: int = 10,
        return_weights: bool = True,
        train_loop_config: dict[str, Any] | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
    ):
        self.spec = FitSpec(
            build_model=build_model,
            dataset_fn=dataset_fn,
            global_batch_size=global_batch_size,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            validation_fn=validation_fn,
            validation_steps=validation_steps,
            callbacks=list(callbacks or []),
            step_mode=step_mode,
            steps_per_call=steps_per_call,
            report_every=report_every,
            return_weights=return_weights,
        )
        scaling = scaling_config or ScalingConfig()
        if scaling.is_elastic and steps_per_epoch is None:
            raise ConfigError(
                f"ScalingConfig.num_workers = {scaling.num_workers} with steps_per_epoch=None: "
                "an elastic group's shards change size with the world size, so one pass over "
                "them is no fixed number of steps; pass steps_per_epoch"
            )
        if scaling.global_batch_size is None:
            # What an elastic group keeps fixed across resizes.
            scaling = dataclasses.replace(scaling, global_batch_size=global_batch_size)
        check_fit_options(self.spec, known_replicas(scaling))
        self._trainer = Trainer(
            functools.partial(run_fit, self.spec),
            train_loop_config=train_loop_config,
            scaling_config=scaling,
            run_config=run_config,
        )

    def as_trainable(self):
        """A Ray Tune trainable (``raytf.integrations.tune``): the trial's config is merged over
        ``train_loop_config``, which ``build_model(config)`` receives.

        Returns:
            (type[ray.tune.Trainable]): A subclass for ``Tuner(trainable, param_space=...)``.

        Raises:
            ConfigError: ``num_workers`` is elastic or 0 (a trial holds a fixed reservation).
        """
        return self._trainer.as_trainable()

    def fit(self) -> Result:
        """Train; the Result's ``history`` is Keras's ``History.history`` (per-epoch lists).

        Returns:
            The run's ``Result``; ``weights`` holds rank 0's final weights (NumPy arrays)
                when ``return_weights``, ``load_model()`` the trained model.

        Raises:
            ConfigError: Before any worker starts, as ``Trainer.fit`` (storage, cluster);
                ``RunDirInUseError`` when another driver holds the run directory.
            UnsatisfiableResourcesError: No node can ever hold a worker.
            TrainingFailedError: The run failed; ``causes`` holds raytf's errors
                (``WorkerError`` for an exception on a worker, an uncompiled model among
                them, ``WorkerDiedError``, ``WorkerHangError``, ``CheckpointMismatchError``,
                ...), ``result`` the partial ``Result``.
        """
        result = self._trainer.fit()
        chief = result.worker_results[0] if result.worker_results else None
        if isinstance(chief, dict) and "weights" in chief:
            result.weights = chief.pop("weights")
        return result
