"""Calling the user's functions with or without the run's config: one rule for all of them.

``train_loop_per_worker``, ``build_model`` and ``dataset_fn`` may each take
the config as one more positional parameter, or not: Ray Train's loops take
it, TensorFlow's tutorials' functions do not.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def call_user(fn: Callable[..., Any], *args: Any, config: dict) -> Any:
    """Call ``fn(*args)``, or ``fn(*args, config)`` when it takes one more parameter."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(*args)
    positional = [
        p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    takes_varargs = any(p.kind is p.VAR_POSITIONAL for p in params.values())
    if takes_varargs or len(positional) > len(args):
        return fn(*args, config)
    return fn(*args)


class UnsendableResultError(TypeError):
    """What the loop returned cannot travel to the driver."""


def sendable(value: Any, rank: int | None) -> Any:
    """``value`` if Ray can pickle it to the driver, else an error naming the rank and why.

    Checked here, on the worker, so the run fails as the user's error it is
    rather than as an opaque ``RayTaskError`` from the driver's next poll.
    """
    from ray import cloudpickle

    try:
        cloudpickle.dumps(value)
    except Exception as exc:  # noqa: BLE001 - any pickling failure means the same thing
        raise UnsendableResultError(
            f"rank {rank}: train_loop_per_worker returned a {type(value).__name__} that cannot "
            f"be sent to the driver ({type(exc).__name__}: {exc}); return plain values "
            "(numbers, lists, dicts, NumPy arrays), e.g. model.get_weights() instead of a model"
        ) from exc
    return value
