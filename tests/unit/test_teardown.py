"""The iterator reaper frees only what nobody else holds, and frees it on its own thread.
(The TF hook itself is tested end to end: tests/integration/test_train.py.)"""

import threading
import time

from raytf.worker.teardown import Reaper


class Handle:
    """Stands in for an iterator's resource handle: records where it was freed."""

    freed_on: list[str] = []

    def __del__(self):
        Handle.freed_on.append(threading.current_thread().name)


def test_a_handle_in_use_is_kept_and_a_dropped_one_is_freed():
    reaper = Reaper(period_s=None)
    used, dropped = Handle(), Handle()
    keep_alive = object()
    reaper.hold(used, keep_alive)
    reaper.hold(dropped, None)
    del dropped
    assert reaper.reap() == 1 and reaper.held() == 1
    assert reaper.reap() == 0  # still referenced by `used`
    del used
    assert reaper.reap() == 1 and reaper.held() == 0 and reaper.freed == 2


def test_dropped_handles_are_freed_on_the_reaper_thread():
    Handle.freed_on.clear()
    reaper = Reaper(period_s=0.02)
    for _ in range(3):
        reaper.hold(Handle(), None)
    deadline = time.monotonic() + 10
    while reaper.held() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reaper.held() == 0
    assert Handle.freed_on == ["raytf-iterator-reaper"] * 3
