"""Ray's own lines on the driver's screen that ask nothing of the user, held back.

Ray forwards its GCS server's error log to every driver (``(gcs_server)``
lines). When raytf ends a group it kills its actors, and an actor whose process
has already exited (the loop returned, a rank was SIGKILLed) makes GCS log
"Failed to kill actor ... RpcError" for the kill it could no longer deliver:
the state raytf asked for, reported as an error at the end of runs that went
well. Such a line is dropped from the screen only; Ray keeps it in its session's
``logs/gcs_server.err`` as always. Every other line Ray forwards, a GCS line
included, reaches the screen unchanged.

Ray's log stream is private API (``ray._private.ray_logging``): where it is not
as read here, nothing is changed and Ray prints as it does.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("raytf")

# (the process Ray names for the line, what the line says)
HELD = (("gcs_server", "Failed to kill actor"),)
_HANDLER = "ray_print_logs"  # the handler ray.init adds to print forwarded lines


def held(source: Any, line: str) -> bool:
    return any(source == who and what in line for who, what in HELD)


def install(dispatcher: Any = None) -> bool:
    """Wrap the handler that prints forwarded lines, once; False where it is not there
    (no ``log_to_driver``, or a Ray whose log stream is not as read here)."""
    if dispatcher is None:
        try:
            from ray._private.ray_logging import global_worker_stdstream_dispatcher
        except ImportError:
            return False
        dispatcher = global_worker_stdstream_dispatcher
    try:
        with dispatcher._lock:
            handlers = list(dispatcher.handlers)
            for i, (name, handle) in enumerate(handlers):
                if name == _HANDLER and not getattr(handle, "_raytf_holds", False):
                    handlers[i] = (name, _holding(handle))
                    dispatcher.handlers = handlers
                    return True
            return any(name == _HANDLER for name, _ in handlers)
    except (AttributeError, TypeError, ValueError) as exc:
        logger.info("raytf: Ray's forwarded lines not filtered (%s)", exc)
        return False


def _holding(handle):
    def holding(data: dict) -> None:
        source = data.get("pid")
        lines = data.get("lines") or []
        kept = [line for line in lines if not held(source, line)]
        if len(kept) == len(lines):
            handle(data)
        elif kept:
            handle({**data, "lines": kept})

    holding._raytf_holds = True
    return holding
