"""Keras 3's own ``model.fit`` on raytf workers, through one callback.

Inside ``train_loop_per_worker``: build and compile the model in
``ctx.strategy.scope()`` (or a ``tf.distribute.MultiWorkerMirroredStrategy()``
of your own: it is the same group), then ``model.fit(..., callbacks=[cb])``
with ``cb = ReportCheckpointCallback()``. It streams metrics to the driver
and takes part in raytf's coordinated checkpoints: every rank saves at the
same step. ``cb.restore(model)`` restores model and optimizer from the latest
committed checkpoint and returns the step to resume after;
``cb.initial_epoch_for(steps_per_epoch)`` is the epoch to pass to ``fit``. Keras's ``fit`` starts
at an epoch boundary only, so checkpoint at epoch ends
(``checkpoint_every_steps = steps_per_epoch``) for an exact resume.

The same logic serves ``tf_keras`` (``raytf.keras.legacy``): only the base
class differs.
"""

from __future__ import annotations

from typing import Any

import keras

from raytf.keras.callbacks import callbacks_for_rank
from raytf.worker.context import get_context


class ReportCheckpointLogic:
    """What both Keras flavours' callbacks do; mixed into each one's ``Callback``."""

    def _setup(self, report_every: int, global_batch_size: int | None) -> None:
        self.report_every = int(report_every)
        self.global_batch_size = global_batch_size
        self.step = 0
        self._reported = 0
        self._ended: int | None = None  # the last step handed to step_end
        self._ended_resumable = False

    def restore(self, model: Any) -> int:
        """Restore model and optimizer from the latest committed checkpoint; the step after it.

        Call once per worker, after ``compile`` and before ``fit``.

        Args:
            model: The compiled Keras model; its ``optimizer`` is restored with it.

        Returns:
            The global step the run resumes after: 0 for a fresh run.

        Raises:
            RuntimeError: ``restore`` (or ``get_context().restore``) already ran here.
            CheckpointMismatchError: The checkpoint does not fit this model; at ``fit()``,
                the cause of a ``TrainingFailedError``, never retried.
        """
        self.step = get_context().restore(model=model, optimizer=model.optimizer)
        self._reported = self.step
        return self.step

    def initial_epoch_for(self, steps_per_epoch: int) -> int:
        """The epoch ``fit`` resumes at, for an epoch of ``steps_per_epoch`` steps.

        Args:
            steps_per_epoch: Batches per epoch, as passed to ``fit``.

        Returns:
            ``fit``'s ``initial_epoch``: the epochs the restored step completed.
        """
        return self.step // int(steps_per_epoch)

    def _examples(self) -> int | None:
        if self.global_batch_size is None:
            return None
        return (self.step - self._reported) * self.global_batch_size

    def _step_end(self, resumable: bool) -> None:
        # Once per step; again at an epoch's end when its last batch (an epoch of unknown
        # length) ended it as not resumable: the epoch's end is where fit() can resume.
        if self._ended != self.step or (resumable and not self._ended_resumable):
            self._ended, self._ended_resumable = self.step, resumable
            get_context().step_end(self.step, resumable=resumable)

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Keras's hook: tells the driver the step ``fit`` ends at (``raytf status``'s ETA).

        Args:
            logs: Keras's logs (unused).
        """
        params = getattr(self, "params", None) or {}
        if params.get("steps") and params.get("epochs"):
            get_context().set_total_steps(int(params["steps"]) * int(params["epochs"]))

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Keras's hook: counts the step, reports every ``report_every``, ends the step.

        Args:
            batch: The batch's index in its epoch, from 0.
            logs: The batch's metrics, as Keras gives them.
        """
        ctx = get_context()
        self.step += 1
        if self.step % self.report_every == 0:
            ctx.report({"step": self.step, **(logs or {})}, examples=self._examples())
            self._reported = self.step
        steps = (getattr(self, "params", None) or {}).get("steps")
        if steps is None or batch + 1 < steps:
            # fit() cannot start mid-epoch: on-demand and emergency saves wait for its end.
            self._step_end(resumable=False)
        # Else the epoch's last step ends in on_epoch_end, after validation and the
        # report: a checkpoint there never commits without the report of its step.

    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Keras's hook: a validation batch shows the driver's watchdog this rank is busy.

        Args:
            batch: The batch's index.
            logs: Keras's logs (unused).
        """
        get_context().heartbeat()  # validation is work, not a hang

    def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Keras's hook: a prediction batch shows the watchdog this rank is busy.

        Args:
            batch: The batch's index.
            logs: Keras's logs (unused).
        """
        get_context().heartbeat()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Keras's hook: reports the epoch's metrics, then ends a resumable step.

        Args:
            epoch: The epoch's index, from 0 (reported as ``epoch + 1``).
            logs: The epoch's metrics, validation ones included.
        """
        ctx = get_context()
        metrics = {"step": self.step, "epoch": epoch + 1, "epoch_end": True, **(logs or {})}
        ctx.report(metrics, examples=self._examples())
        self._reported = self.step
        self._step_end(resumable=True)


class ReportCheckpointCallback(ReportCheckpointLogic, keras.callbacks.Callback):
    """Report every ``report_every`` batches and at epoch ends; checkpoint on cue (Keras 3).

    Use it inside ``train_loop_per_worker`` only: its hooks call ``raytf.get_context()``.

    Args:
        report_every: Batches between reports to the driver. Default 10.
        global_batch_size: Examples per step over the group, for the driver's
            examples/s. Default None: no throughput.
    """

    def __init__(self, report_every: int = 10, global_batch_size: int | None = None):
        super().__init__()
        self._setup(report_every, global_batch_size)


def for_this_rank(callbacks: list[Any]) -> list[Any]:
    """The callbacks this worker should pass to ``fit``: the same rule as ``KerasTrainer``
    (file writers and progress bars on the chief only; deciding ones everywhere).

    Args:
        callbacks: Keras callbacks, the same list on every rank.

    Returns:
        A new list: all of them on rank 0, on other ranks those that do not write
            files or print (TensorBoard, ModelCheckpoint, CSVLogger, ProgbarLogger).

    Raises:
        ConfigError: ``BackupAndRestore`` is among them (raytf checkpoints the group).
        RuntimeError: Called outside ``train_loop_per_worker``.
    """
    return callbacks_for_rank(list(callbacks), get_context().rank)
