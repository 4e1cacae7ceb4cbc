"""Driver-side callbacks: user code told what the run does, never able to stall it.

``RunConfig(callbacks=[...])`` takes ``raytf.Callback`` objects (Ray Train's
``UserCallback`` in spirit). The controller only puts events on a queue; one
thread of their own calls the callbacks in order. A slow callback delays the
callbacks, never the control loop; one that raises is logged, once per
method, and called again on the next event.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

logger = logging.getLogger("raytf")

_DRAIN_TIMEOUT_S = 30.0  # at the end of a run: how long to wait for slow callbacks


class Callback:
    """Override what you need; each is called on the driver, on the callbacks' thread."""

    def on_report(self, metrics: dict[str, Any]) -> None:
        """Rank 0 reported ``metrics``.

        Args:
            metrics: The report as the loop gave it (plain Python values), ``step`` included
                when the loop sent one.
        """

    def on_checkpoint(self, step: int, path: str) -> None:
        """A checkpoint of every rank at ``step`` was committed at ``path``.

        Args:
            step: The global step the checkpoint was taken after.
            path: The committed checkpoint's directory (a path or a URL) under the run
                directory's ``checkpoints/``.
        """

    def on_failure(self, attempt: int, kind: str, error: BaseException) -> None:
        """Attempt ``attempt`` failed; ``kind`` is raytf's classification.

        Args:
            attempt: The attempt that failed, from 1.
            kind: ``user_error``, ``worker_died``, ``collective``, ``hang``, ``setup``,
                ``dependency``, ``restore``, ``checkpoint_mismatch``, ``storage``, or
                ``fatal`` for a failure that ends the run at once.
            error: The cause: a ``WorkerError``, ``WorkerDiedError``, ``WorkerHangError``...
        """

    def on_restart(self, attempt: int) -> None:
        """The group is being started again as attempt ``attempt``.

        Args:
            attempt: The attempt about to start, from 2.
        """

    def on_state(self, old: str, new: str) -> None:
        """The run moved from state ``old`` to ``new`` (SCHEDULING, RUNNING, ...).

        Args:
            old: The state left: SCHEDULING, STARTING, RUNNING or RESTARTING.
            new: The state entered, a terminal one (FINISHED, ERRORED, STOPPED) included.
        """

    def on_run_end(self, state: str) -> None:
        """The run ended as ``state`` (FINISHED, ERRORED, STOPPED); the last call.

        Args:
            state: FINISHED, ERRORED or STOPPED.
        """


class DriverCallbacks:
    """The queue and thread between the controller and the user's callbacks."""

    def __init__(self, callbacks: list[Callback] | tuple = ()):
        self.callbacks = list(callbacks)
        self._queue: queue.Queue = queue.Queue()
        self._failed: set[tuple[int, str]] = set()
        self._thread: threading.Thread | None = None
        if self.callbacks:
            self._thread = threading.Thread(target=self._run, daemon=True, name="raytf-callbacks")
            self._thread.start()

    def emit(self, method: str, *args: Any) -> None:
        """Called by the controller: returns at once."""
        if self._thread is not None:
            self._queue.put((method, args))

    def state(self, old: str, new: str, attempt: int) -> None:
        self.emit("on_state", old, new)
        if old == "RESTARTING" and new == "SCHEDULING":
            self.emit("on_restart", attempt + 1)

    def close(self, state: str) -> None:
        """Tell the callbacks the run ended, let them see every event of the run (bounded
        wait), then stop the thread."""
        if self._thread is None:
            return
        self.emit("on_run_end", state)
        self._queue.put(None)
        self._thread.join(_DRAIN_TIMEOUT_S)
        if self._thread.is_alive():
            logger.warning("callbacks still busy after %.0f s: not waiting", _DRAIN_TIMEOUT_S)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            method, args = item
            for i, cb in enumerate(self.callbacks):
                call = getattr(cb, method, None)  # raytf's record keepers hear on_poll too
                if call is None:
                    continue
                try:
                    call(*args)
                except Exception:  # noqa: BLE001 - a callback's bug must not end the run
                    if (i, method) not in self._failed:
                        self._failed.add((i, method))
                        logger.exception("callback %r.%s raised", cb, method)
