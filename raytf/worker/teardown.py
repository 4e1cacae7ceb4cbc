"""tf.data iterators are destroyed off the training thread.

Destroying a ``tf.data`` iterator waits for its background threads, and with the
autotuner on that has been seen to take 3-32 s (10.5 s for a plain user
pipeline under MWMS here). The wait happens in whichever thread drops the last
reference, which at the end of a run is the user's loop returning: its locals
go, the iterator goes, and the run's result waits behind the teardown. raytf
cannot turn the autotuner off in pipelines it does not build, so in a raytf
worker every eager iterator's resource handle is also held here, and a
background thread drops the ones nobody else holds. The user's thread then
only drops a Python reference; the C++ teardown runs on the reaper's thread,
and a run ends when its last step ends.

The handle is kept together with the iterator's dataset: a ``from_generator``
pipeline's Python functions are registered by the dataset and must outlive
the iterator's threads.
"""

from __future__ import annotations

import sys
import threading
import time

_lock = threading.Lock()
_reaper: Reaper | None = None


def _held_elsewhere(handle) -> bool:
    # References while this runs: the list slot, this frame's argument and
    # getrefcount's own. Anything more is the iterator (or a copy) still in use.
    return sys.getrefcount(handle) > 3


class Reaper:
    """Holds resource handles; frees those only it holds, on its own thread
    (every ``period_s``; None: only when ``reap`` is called)."""

    def __init__(self, period_s: float | None):
        self.period_s = period_s
        self._held: list[tuple[object, object]] = []
        self._lock = threading.Lock()
        self.freed = 0
        if period_s is not None:
            threading.Thread(target=self._run, name="raytf-iterator-reaper", daemon=True).start()

    def hold(self, handle, keep_alive) -> None:
        with self._lock:
            self._held.append((handle, keep_alive))

    def held(self) -> int:
        with self._lock:
            return len(self._held)

    def reap(self) -> int:
        """Drop what only this holds; returns how many. The teardown runs here."""
        with self._lock:
            keep, free = [], []
            for entry in self._held:
                (keep if _held_elsewhere(entry[0]) else free).append(entry)
            self._held = keep
        count = len(free)
        del free  # the slow C++ destructors run now, on this thread, outside the lock
        self.freed += count
        return count

    def _run(self) -> None:
        while True:
            time.sleep(self.period_s)
            self.reap()


def install(period_s: float = 1.0) -> Reaper:
    """Route every eager tf.data iterator of this process through the reaper.

    Idempotent; called in raytf workers only, after MWMS exists (it runs no op).
    """
    global _reaper
    with _lock:
        if _reaper is not None:
            return _reaper
        from tensorflow.python.data.ops import iterator_ops, multi_device_iterator_ops
        from tensorflow.python.framework import ops

        reaper = Reaper(period_s)

        def wrap(cls, attr: str) -> None:
            original = cls.__init__

            def __init__(self, *args, **kwargs):
                original(self, *args, **kwargs)
                handle = getattr(self, attr, None)
                if isinstance(handle, ops.EagerTensor):  # not a graph tensor in a tf.function
                    reaper.hold(handle, getattr(self, "_dataset", None))

            __init__.__wrapped__ = original
            cls.__init__ = __init__

        wrap(iterator_ops.OwnedIterator, "_iterator_resource")
        wrap(multi_device_iterator_ops.OwnedMultiDeviceIterator, "_multi_device_iterator_resource")
        _reaper = reaper
        return reaper
