"""tf_keras (legacy Keras 2) ``model.fit`` on raytf workers, through one callback.

``tf_keras``'s own ``fit`` works under multi-worker MWMS (it is what Ray Train
falls back to). Inside ``train_loop_per_worker``, build and compile the model
in ``ctx.strategy.scope()``, and add ``ReportCheckpointCallback``: it streams
metrics to the driver and takes part in raytf's coordinated checkpoints. Its
``restore(model)`` returns the step to resume after; ``tf_keras``'s ``fit`` can
only start at an epoch (``initial_epoch``), so checkpoint at epoch ends
(``checkpoint_every_steps = steps_per_epoch``) for an exact resume. Needs the
``legacy`` extra (``pip install raytf[legacy]``).
"""

from __future__ import annotations

from typing import Any

import tf_keras

from raytf.worker.context import get_context


class ReportCheckpointCallback(tf_keras.callbacks.Callback):
    """Report metrics every ``report_every`` batches and at epoch ends; checkpoint on cue."""

    def __init__(self, report_every: int = 10, global_batch_size: int | None = None):
        super().__init__()
        self.report_every = int(report_every)
        self.global_batch_size = global_batch_size
        self.step = 0
        self._reported = 0

    def restore(self, model: Any) -> int:
        """Restore model and optimizer from the latest committed checkpoint; the step after it."""
        self.step = get_context().restore(model=model, optimizer=model.optimizer)
        self._reported = self.step
        return self.step

    def _examples(self) -> int | None:
        if self.global_batch_size is None:
            return None
        return (self.step - self._reported) * self.global_batch_size

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        ctx = get_context()
        self.step += 1
        ctx.step_end(self.step)
        if self.step % self.report_every == 0:
            ctx.report({"step": self.step, **(logs or {})}, examples=self._examples())
            self._reported = self.step

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        ctx = get_context()
        metrics = {"step": self.step, "epoch": epoch + 1, "epoch_end": True, **(logs or {})}
        ctx.report(metrics, examples=self._examples())
        self._reported = self.step
