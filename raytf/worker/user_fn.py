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
