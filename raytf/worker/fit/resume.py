"""Keras's own ``model.fit``, with no raytf callback, checkpointed at any step and resumed
exactly where the checkpoint was taken.

The first ``fit`` call of a worker names the model and its optimizer to raytf's
checkpoints (restoring them when the run resumes), and a callback raytf adds
to the call keeps its place in them: the call, the epoch, the batch, the
batches drawn from the input (``raytf.worker.fit.position``), the epoch's
metric accumulators (every replica's partials, ``raytf.worker.fit.metric_state``)
and the epochs already done. On a restart the same ``fit`` call, unchanged,
finds that place: its input is skipped to the next batch, the accumulators are
put back after Keras resets them at the epoch's start, the callbacks see the
epoch and batch numbers they would have seen, and the ``History`` it returns
has every epoch. ``fit`` calls a resumed worker had finished before the
checkpoint return at once (their ``History`` holds no epoch).

Each step is resumable when the input's position is exact; when it is not
(``why_not_exact``), steps are resumable only at epoch ends, and the worker
says why once: a save the run asks for in mid-epoch waits for the epoch's end.

A loop that passes raytf's callback, or names its own state with
``raytf.get_context().restore(...)``, keeps doing so: ``fit`` then only
reports and checkpoints at epoch ends, as raytf's callback would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from raytf.checkpoint.restore import set_rng_state
from raytf.errors import ConfigError
from raytf.worker import liveness
from raytf.worker.fit import callback_state
from raytf.worker.fit.keeper import Keeper, strategy_of
from raytf.worker.fit.position import STREAM, Call, Position, classify, resume_calls
from raytf.worker.fit.rng_ends import RngEnds

STATE_NAME = "keras_fit"


class _Worker:
    """What one worker knows about its ``fit`` calls in one attempt of one run (a kept
    process serves several: a new context starts it afresh)."""

    def __init__(self, ctx: Any = None):
        self.ctx = ctx
        self.calls = 0  # fit calls started in this attempt
        self.model: Any = None  # the model raytf's checkpoints hold (tracked by the first fit)
        self.optimizer: Any = None  # the optimizer they hold: the model's at that first fit
        self.untracked_said = False
        self.inexact_said = False
        self.saved: dict | None = None  # the restored place, until its call has used it
        self.live: Any = None  # the callback of the call running now (the state's source)
        # Python's and NumPy's RNGs at the ends of the finished tracked calls the program
        # drew after: a replayed call puts its end back.
        self.rng = RngEnds()

    def state(self) -> dict | None:
        return None if self.live is None else {**self.live.state(), **self.rng.doc()}

    def restore(self, doc: Any) -> None:
        self.saved = doc if isinstance(doc, dict) else None
        self.rng.restore(self.saved)
        if self.saved is not None and int(self.saved.get("v", 1)) < 2:
            print(
                "[raytf] the checkpoint's fit place was written by an earlier raytf, which "
                "counted every fit call: a loop with a fit on another model before this "
                "model's may resume the wrong call (not exact)",
                flush=True,
            )


_current = _Worker()


def _worker_of(ctx: Any) -> _Worker:
    """This attempt's record: a new context (a new attempt, or a kept process's next
    run) starts a new one, so no place carries over."""
    global _current
    if _current.ctx is not ctx:
        _current = _Worker(ctx)
    return _current


def _track(worker: _Worker, model: Any, x: Any, ctx: Any) -> bool:
    """Name ``model`` to raytf's checkpoints (restoring it if the run resumes) at the
    worker's first ``fit``; True when this call's steps are checkpointed by raytf."""
    if worker.model is not None:
        return worker.model is model
    if ctx.is_tracking() or model.optimizer is None:
        return False
    if not model.built and not _build(model, x, strategy_of(model, ctx)):
        return False
    ctx.add_checkpoint_state(STATE_NAME, worker.state, worker.restore)
    ctx.restore(model=model, optimizer=model.optimizer)
    worker.rng.restored()
    worker.model, worker.optimizer = model, model.optimizer
    return True


def _say_recompiled(worker: _Worker, model: Any, index: int, ctx: Any) -> None:
    """A model compiled again since raytf's checkpoints named its optimizer (fine-tuning):
    they hold the weights, not the new optimizer's state, so a resume in this call is
    not exact; said at the call, before any fault, never left to be found out."""
    if worker.model is model and model.optimizer is not worker.optimizer and ctx.is_chief:
        print(
            f"[raytf] fit call {index + 1}: the model was compiled again after raytf's "
            "checkpoints named its optimizer: they hold its weights, not the new "
            "optimizer's state, so a resume inside this call restarts that state (not exact)",
            flush=True,
        )


def _build(model: Any, x: Any, strategy: Any) -> bool:
    """Create the variables of a model made without ``keras.Input`` (Keras builds it at
    ``fit``'s start, after the restore must have run) by calling it on the input's
    first batch, as Keras's symbolic build would; every run of the loop does alike."""
    import keras
    import tensorflow as tf

    if not isinstance(x, tf.data.Dataset):
        return False
    inputs, _, _ = keras.utils.unpack_x_y_sample_weight(next(iter(x.take(1))))
    with strategy.scope():
        model(inputs, training=False)
    return bool(model.built)


def _say_untracked(worker: _Worker, model: Any, ctx: Any) -> None:
    if worker.untracked_said:
        return
    worker.untracked_said = ctx.state_said = True  # this line says it
    if ctx.is_tracking() and worker.model is None:
        return  # the loop named its own state: its checkpoints are its own
    why = "not built: start it with keras.Input" if not model.built else "another model"
    print(
        f"[raytf] rank {ctx.rank}: fit on a model raytf's checkpoints do not hold ({why}): "
        "its steps are reported, not checkpointed, and after a restart it trains again "
        "from its first epoch",
        flush=True,
    )


def fit(method: Any, bound: Any, ctx: Any) -> Any:
    """Run Keras's ``fit`` (``method`` with its arguments ``bound``) as described above."""
    import keras

    worker = _worker_of(ctx)
    model, args = bound.arguments["self"], bound.arguments
    user_callbacks = list(args.get("callbacks") or [])
    callback_state.refuse_backup_and_restore(user_callbacks)
    tracked = _track(worker, model, args.get("x"), ctx)
    if not tracked:
        _say_untracked(worker, model, ctx)
        index = -1  # its place is not the checkpoint's: it never takes a saved one
    else:  # a place belongs to the tracked model's calls, counted apart from others'
        index, worker.calls = worker.calls, worker.calls + 1
        _say_recompiled(worker, model, index, ctx)
        worker.rng.call_starts(index)
    epochs = int(args.get("epochs", 1))
    kind = classify(args.get("x"), args.get("steps_per_epoch"), args.get("shuffle", True))
    saved = worker.saved if tracked else None
    if tracked:
        worker.saved = None
    if saved is not None and int(saved.get("call", 0)) > index:
        worker.saved = saved  # a later call's place: this one had finished
        worker.rng.replayed(index, ctx.rank)  # as this call left them
        print(
            f"[raytf] rank {ctx.rank}: fit call {index + 1} had finished before the checkpoint",
            flush=True,
        )
        return keras.callbacks.History()
    resumed = saved if saved is not None and int(saved.get("call", -1)) == index else None
    at = _place(resumed, index, int(args.get("initial_epoch", 0)), kind)
    if kind.why_not_exact and tracked and ctx.is_chief and not worker.inexact_said:
        worker.inexact_said = True  # once: a loop may call fit once per epoch
        print(f"[raytf] fit checkpoints at epoch ends only: {kind.why_not_exact}", flush=True)
    if resumed is not None and kind.restart_note and at.drawn and ctx.is_chief:
        print(
            f"[raytf] fit call {index + 1} resumed at epoch {at.epoch + 1} (step "
            f"{ctx.last_step}), not exact: {kind.restart_note}",
            flush=True,
        )
    calls = resume_calls(at, epochs, kind)
    if resumed is not None:
        if resumed.get("stopped"):  # a callback stopped it: it trains no more
            calls = []
            model.stop_training = True
        if calls:
            worker.rng.resumed(index)
        else:
            _ended_before(resumed, index, ctx)
    keeper = Keeper(ctx, at, kind, tracked, resumed, ctx.last_step, epochs, user_callbacks)
    verbose = args.get("verbose", "auto")
    callbacks = _Spliced(
        [*user_callbacks, keeper],
        add_history=True,
        add_progbar=verbose != 0,
        verbose=verbose,
        epochs=epochs,
        steps=kind.steps,
        model=model,
    )
    if tracked:
        worker.live = keeper  # kept after the call: a later save holds its end
    for n, call in enumerate(calls):
        callbacks.splice(call, first=n == 0, last=n == len(calls) - 1)
        one = _call_args(bound, call, callbacks, kind)
        with _averages_at_the_end_only(model, last=n == len(calls) - 1):
            with _skipping(call.skip, skip_allowance(call.skip, resumed)):
                method(*one.args, **one.kwargs)
        if model.stop_training and n < len(calls) - 1:  # the callbacks' training ends here
            _finalize_averages(model)  # as Keras's fit does after a stop, before the end
            callbacks.splice(call, first=False, last=True)
            callbacks.on_train_end()
            break
    keeper.finished()
    if tracked:
        worker.rng.call_ended()
    history = model.history if calls else keras.callbacks.History()
    _prepend(history, keeper.restored_epochs)
    return history


def _ended_before(resumed: dict, index: int, ctx: Any) -> None:
    """The call holding the checkpoint's place had ended (its epochs done, or a callback
    stopped it) when the checkpoint was taken: it returns at once, with the RNGs as it
    left them; what its callbacks did at its end and no checkpoint holds is said."""
    if resumed.get("rng_after"):
        set_rng_state(resumed["rng_after"])  # what the program does next redraws
    kept = [e for e in resumed.get("callbacks") or [] if e and e[0] == "EarlyStopping"]
    best = any(e[1].get("had_best_weights") for e in kept)
    if best and not resumed.get("returned") and ctx.is_chief:
        print(
            f"[raytf] fit call {index + 1} had ended before the checkpoint; "
            "EarlyStopping(restore_best_weights=True) puts its best weights back at the "
            "end and the checkpoint does not hold them: the call returns with the weights "
            "of its last epoch (not exact)",
            flush=True,
        )


def skip_allowance(skip: int, resumed: dict | None) -> float:
    """Seconds a call's skip through ``skip`` batches of its input may take: twice (Keras
    looks at the first batch through an iterator of its own when the model's metrics
    are not built yet, then the call's iterator skips again) what the run took to
    draw and train each batch before the checkpoint. Skipping re-runs the pipeline
    from its first element (a distributed iterator cannot be checkpointed), so its
    time grows with the skip: measured here, 0.9 s for 10^6 elements of tensor
    slices, 41 s with a map (2 cores, beside other work)."""
    if not skip or not resumed or not int(resumed.get("drawn", 0)):
        return 0.0
    per_batch = float(resumed.get("seconds", 0.0)) / int(resumed["drawn"])
    return 2 * skip * per_batch


@contextlib.contextmanager
def _skipping(skip: int, allowance_s: float) -> Iterator[None]:
    """A call that starts by skipping through its input: a silent phase of its own
    (fit's first-step phase is over for the second call of a split), its limit
    ``FailureConfig.phase_timeout_s`` plus ``allowance_s``; the phases open now
    (fit's first step) get as much more."""
    watch = liveness.current()
    if not skip or watch is None:
        yield
        return
    name = f"fit's first step after skipping {skip} batches of its input"
    watch.allow(allowance_s)
    with watch.phase(name, until_progress=True, extra_s=allowance_s):
        yield


def _uses_ema(optimizer: Any) -> bool:
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # a loss-scale optimizer's
    return optimizer is not None and bool(getattr(inner, "use_ema", False))


def _finalize_averages(model: Any) -> None:
    if _uses_ema(getattr(model, "optimizer", None)):
        model.optimizer.finalize_variable_values(model.trainable_weights)


@contextlib.contextmanager
def _averages_at_the_end_only(model: Any, last: bool) -> Iterator[None]:
    """A resume splits one ``fit`` into calls, and Keras ends each with
    ``finalize_variable_values``, which with ``use_ema=True`` overwrites the weights
    with their moving averages: only the last call of the split may do that."""
    optimizer = getattr(model, "optimizer", None)
    if last or not _uses_ema(optimizer):
        yield
        return
    optimizer.finalize_variable_values = lambda *_, **__: None
    try:
        yield
    finally:
        del optimizer.finalize_variable_values  # the class's method again


def _place(resumed: dict | None, index: int, initial_epoch: int, kind: Any) -> Position:
    """Where this call starts: its saved place on a resume, else ``initial_epoch``."""
    if resumed is None:
        return Position(index, initial_epoch, 0, 0)
    at = Position(**{k: int(resumed[k]) for k in ("call", "epoch", "batch", "drawn")})
    if at.batch and kind.why_not_exact:
        raise ConfigError(
            f"the run's checkpoint was taken at batch {at.batch} of epoch {at.epoch + 1} of "
            f"fit call {index + 1}, but this call's input cannot resume there exactly "
            f"({kind.why_not_exact}): start fresh, or make the input deterministic"
        )
    return at


def _call_args(bound: Any, call: Call, callbacks: Any, kind: Any) -> Any:
    """``bound`` with the input skipped and the epochs of ``call``; ``steps_per_epoch``
    stays the call's own unless the input is a stream read on across the split."""
    out = bound.signature.bind(*bound.args, **bound.kwargs)
    x = out.arguments.get("x")
    out.arguments.update(
        x=x.skip(call.skip) if call.skip else x,
        initial_epoch=call.initial_epoch,
        epochs=call.epochs,
        callbacks=callbacks,
    )
    if kind.mode == STREAM:
        out.arguments["steps_per_epoch"] = call.steps_per_epoch
    return out


def _prepend(history: Any, earlier: list) -> None:
    """Put the epochs done before the restart in front of the ``History``'s own."""
    if not earlier:
        return
    history.epoch = [e for e, _ in earlier] + list(getattr(history, "epoch", []))
    merged: dict = {}
    for _, logs in earlier:
        for key, value in logs.items():
            merged.setdefault(key, []).append(value)
    for key, values in (getattr(history, "history", None) or {}).items():
        merged.setdefault(key, []).extend(values)
    history.history = merged


def _spliced_base():
    import keras

    return keras.callbacks.CallbackList


class _Spliced(_spliced_base()):
    """One ``CallbackList`` over the ``fit`` calls of a resume: the callbacks see one
    training (one begin, one end) and the batch numbers of the interrupted epoch."""

    def splice(self, call: Call, first: bool, last: bool) -> None:
        self._offset, self._first, self._last = call.batch_offset, first, last

    def on_train_begin(self, logs=None):
        if self._first:
            super().on_train_begin(logs)

    def on_train_end(self, logs=None):
        if self._last:
            super().on_train_end(logs)

    def on_train_batch_begin(self, batch, logs=None):
        super().on_train_batch_begin(batch + self._offset, logs)

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch + self._offset, logs)
