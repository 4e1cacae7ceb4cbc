"""What Keras's own ``fit``, ``evaluate`` and ``predict`` get inside a raytf worker,
with no raytf call in the loop.

- **Silent phases, declared** (``raytf.worker.liveness``). A ``fit`` call makes
  no optimizer step until its first batch is traced (and, with
  ``jit_compile``, compiled): minutes for a large model, and a second ``fit``
  in the same loop traces again. ``evaluate`` and ``predict`` -- also
  ``fit``'s validation, which calls ``evaluate`` -- make none at all. So
  ``fit`` opens a phase that lasts until the first progress, ``evaluate`` and
  ``predict`` one that lasts the call; each is timed against
  ``FailureConfig.phase_timeout_s`` instead of ``hang_timeout_s``.
- **raytf's checkpoints, at any step, resumed exactly** (``fit_resume``). A
  ``fit`` given no raytf callback names its model and optimizer to raytf's
  checkpoints, keeps its place in them (epoch, batch, input position, the
  epoch's metric accumulators) and, on a restart, resumes where the checkpoint
  was taken; it reports each epoch's logs (``step`` = the run's global step,
  batches counted by raytf), so the progress line, ``raytf status``, the records and
  ``Result.history`` have them. A loop that passes raytf's callback
  (``raytf.keras``, ``raytf.integrations.ray_train``) keeps its own way.
- **One progress bar.** With ``verbose="auto"`` (Keras's default) every rank
  would print the same bar to the driver's screen; other ranks get
  ``verbose=0`` (their logs keep everything else).

They wrap Keras's public methods on ``keras.Model`` (delegating to them, no
private API). tf_keras's ``fit`` (``TF_USE_LEGACY_KERAS=1``) is not wrapped:
its training steps are seen by its optimizer's counter, its validation is not
(a long one needs ``raytf.slow_phase`` or a larger ``hang_timeout_s``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from raytf.worker import liveness

FIRST_STEP = "fit's first step (trace or compile)"
_PHASES = {"evaluate": "evaluate (or fit's validation)", "predict": "predict"}
_installed = False


def _raytf_reports(callbacks: Any) -> bool:
    """Does the loop already pass a callback of raytf's, or of a subclass of one?"""
    return any(k.__module__.startswith("raytf.") for c in callbacks or () for k in type(c).__mro__)


def _in_worker(method: Callable, phase: str, until_progress: bool, reports: bool) -> Callable:
    """``method`` inside a raytf worker: its silent phase declared, Keras's progress bar on
    the chief's screen only (``verbose="auto"``: every rank would print the same bar),
    and for ``fit`` (``reports``) raytf's checkpoints and reports (``fit_resume``)."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        watch = liveness.current()
        if watch is None:
            return method(self, *args, **kwargs)
        from raytf.worker.context import get_context

        bound = signature.bind(self, *args, **kwargs)
        if bound.arguments.get("verbose", "auto") == "auto" and get_context().rank != 0:
            bound.arguments["verbose"] = 0
        callbacks = bound.arguments.get("callbacks")
        with watch.phase(phase, until_progress=until_progress):
            if reports and isinstance(callbacks, (list, tuple, type(None))):
                if not _raytf_reports(callbacks):
                    from raytf.worker.fit import resume as fit_resume

                    return fit_resume.fit(method, bound, get_context())
            return method(*bound.args, **bound.kwargs)

    wrapper.__wrapped__ = method
    return wrapper


def install() -> None:
    """Wrap ``keras.Model.fit``, ``evaluate`` and ``predict`` once per process."""
    global _installed
    if _installed:
        return
    import keras

    keras.Model.fit = _in_worker(keras.Model.fit, FIRST_STEP, until_progress=True, reports=True)
    for method, name in _PHASES.items():
        wrapped = _in_worker(getattr(keras.Model, method), name, False, reports=False)
        setattr(keras.Model, method, wrapped)
    _installed = True
