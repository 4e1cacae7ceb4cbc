"""The callback raytf adds to a ``fit`` call with no raytf callback: it keeps the call's
place for raytf's checkpoints (``raytf.worker.fit.resume``) and reports each epoch.

A step is handed to raytf (``step_end``, where a checkpoint the run asks for is
taken) when the next batch begins or the epoch ends, not when it finishes: only
then is it known whether the step was the epoch's last (an epoch of unknown
length ends when its data does), and a checkpoint at an epoch's last step must
be the epoch's end, taken after its validation and its report. The call's last
epoch end is handed over once more when ``fit`` returns, and only then as a step a
checkpoint may hold: between the two, Keras puts the EMA weights in
(``use_ema``) and callbacks end (``EarlyStopping`` puts its best weights back).

Reports are per epoch, so the driver's history is Keras's ``History``. Keras's
TF backend turns every batch's logs into numbers whether or not a callback
has batch hooks (``IS_THREAD_SAFE`` is False for TF: no async dispatch), so
these hooks add no device sync of their own.
"""

from __future__ import annotations

import time
from typing import Any

import keras

from raytf.checkpoint.restore import rng_state
from raytf.worker.fit import callback_state
from raytf.worker.fit.metric_state import MetricState
from raytf.worker.fit.position import InputKind, Position


def numbers(logs: dict | None) -> dict:
    """The logs' plain numbers: another callback may have put anything in them."""
    out = {}
    for key, value in (logs or {}).items():
        try:
            out[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def strategy_of(model: Any, ctx: Any) -> Any:
    """The strategy the model's variables belong to: raytf's, or one the loop made itself
    (a Ray Train script's own MultiWorkerMirroredStrategy())."""
    return getattr(model, "distribute_strategy", None) or ctx.strategy


# The place's format: 2 counts calls of the tracked model only (1 counted every fit call);
# 3 adds ``stopped`` and the RNG ends of earlier calls (``rng_ends``; 2's ``rng_before``
# is read as the end of the call before the place).
STATE_VERSION = 3


class Keeper(keras.callbacks.Callback):
    """The place of one ``fit`` call: the state raytf's checkpoints hold for it."""

    def __init__(
        self,
        ctx: Any,
        at: Position,
        kind: InputKind,
        tracked: bool,
        saved: dict | None,
        step: int,
        epochs: int,
        user_callbacks: list = (),
    ):
        super().__init__()
        self.ctx = ctx
        self.call, self.epoch, self.batch, self.drawn = at.call, at.epoch, at.batch, at.drawn
        self.steps = kind.steps
        self.epochs = int(epochs)  # the call's own (a resume splits it into Keras calls)
        # A callback set ``model.stop_training`` (EarlyStopping, TerminateOnNaN): the call
        # has ended, though epochs are left; a resume must not train them.
        self.stopped = bool((saved or {}).get("stopped"))
        self.returned = False  # fit returned: its callbacks' on_train_end has run
        # Mid-epoch steps resumable only when the input's position is exact and the
        # checkpoint holds this call's place (not a loop's own restore()).
        self.exact = tracked and kind.why_not_exact is None
        self.epochs_logs = [(int(e), dict(logs)) for e, logs in (saved or {}).get("epochs", [])]
        self.restored_epochs = list(self.epochs_logs)
        self._saved_metrics = (saved or {}).get("metrics") if at.batch else None
        self._metric_state: MetricState | None = None
        self._pending = False
        self.user_callbacks = list(user_callbacks)
        self.rng_after: dict | None = None  # Python's and NumPy's RNGs as the call ended
        # Wall seconds the call has run, across restarts: what drawing its batches took,
        # an upper bound on skipping through them again (``resume.skip_allowance``).
        self.seconds = float((saved or {}).get("seconds", 0.0))
        self._since: float | None = None
        self._saved_callbacks = (saved or {}).get("callbacks")
        self._deferred = False  # the call's last step was not resumable (on_epoch_end)
        # The run's global step, counted here batch by batch from where the run stands
        # (``ctx.last_step``): never ``optimizer.iterations``, which a recompile resets,
        # a loss-scale optimizer skips and gradient accumulation divides.
        self.step = step

    # -- the checkpoint's state ----------------------------------------------------
    def state(self) -> dict:
        """JSON-able; every rank calls it at the same step (the metrics' one all-reduce)."""
        doc = {
            "v": STATE_VERSION,
            "call": self.call,
            "epoch": self.epoch,
            "batch": self.batch,
            "drawn": self.drawn,
            "epochs": [[e, logs] for e, logs in self.epochs_logs],
            "callbacks": callback_state.capture(self.user_callbacks),
            "seconds": round(self.seconds, 3),
        }
        for flag in ("stopped", "returned"):
            if getattr(self, flag):
                doc[flag] = True
        if self.rng_after is not None:
            doc["rng_after"] = self.rng_after
        if self.batch:  # an epoch's start resets them: nothing to keep
            doc["metrics"] = self._metrics().capture()
        return doc

    def _metrics(self) -> MetricState:
        if self._metric_state is None:  # Keras builds them at fit's start, not before
            strategy = strategy_of(self.model, self.ctx)
            local = int(strategy.num_replicas_in_sync) // self.ctx.world_size
            variables = [v for m in self.model.metrics for v in m.variables]
            self._metric_state = MetricState(strategy, variables, self.ctx.rank * local)
        return self._metric_state

    # -- Keras's hooks ------------------------------------------------------------
    def on_train_begin(self, logs: dict | None = None) -> None:
        # Last in the list: the user's callbacks have just reset themselves.
        if self._saved_callbacks is not None:
            for line in callback_state.restore(self.user_callbacks, self._saved_callbacks):
                if self.ctx.is_chief:
                    print(f"[raytf] {line}", flush=True)
            self._saved_callbacks = None
        self._since = time.monotonic()
        epochs = (self.params or {}).get("epochs")
        if self.steps and epochs:
            left = (int(epochs) - self.epoch) * self.steps - self.batch
            self.ctx.set_total_steps(self.step + left)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.epoch = epoch
        if self._saved_metrics is not None:  # after Keras's reset_metrics() at the start
            self._metrics().restore(self._saved_metrics)
            self._saved_metrics = None

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self._pending:  # the step before was not the epoch's last
            self._pending = False
            self.ctx.step_end(self.step, resumable=self.exact)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        # ``batch`` is the last batch of the execution (the spliced list adds the
        # epoch's offset): with ``steps_per_execution`` > 1 one call covers several.
        now = time.monotonic()
        if self._since is not None:
            self.seconds += now - self._since
        self._since = now
        done = max(int(batch) + 1 - self.batch, 1)
        self.step += done
        self.batch += done
        self.drawn += done
        self._pending = True

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        values = numbers(logs)
        self.epochs_logs.append((epoch, values))
        report = {"step": self.step, "epoch": epoch + 1, "epoch_end": True, **values}
        self.ctx.report(report)
        self.epoch, self.batch, self._pending = epoch + 1, 0, False
        # Keras reads ``stop_training`` after ``on_epoch_end`` (this callback is last).
        self.stopped = self.stopped or bool(getattr(self.model, "stop_training", False))
        # The call's last step. What fit does after its last epoch's end changes the
        # state: EMA weights put in (use_ema), EarlyStopping's best weights put back
        # (on_train_end). No checkpoint of this step holds them yet, so a save due here
        # waits for fit's return (``finished``, which takes the RNGs' state there too).
        self._deferred = self.stopped or self.epoch >= self.epochs
        # After the report: a checkpoint at an epoch's end never lacks that epoch's logs.
        self.ctx.step_end(self.step, resumable=not self._deferred)

    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.ctx.heartbeat()  # fit's validation is work, not a hang

    def finished(self) -> None:
        """The call returned: a save after it holds a place with nothing left to run, and
        the RNGs' state at this moment. A restart skips this call, then runs again
        what the program did after it (building a second model, say); a checkpoint
        taken later holds the RNGs of that later moment, which would shift every draw
        the program makes again: the call's return puts back these."""
        self.epoch, self.batch, self._pending = max(self.epoch, self.epochs), 0, False
        self.rng_after = rng_state()
        self.returned = True
        if self._deferred:  # the save owed since the last epoch's end, its weights final
            self._deferred = False
            self.ctx.step_end(self.step, resumable=True)
