"""Ray's teardown notes held back from the driver's screen (raytf.driver.ray_lines), on
Ray's own dispatcher class."""

import pytest
from ray._private.ray_logging import WorkerStandardStreamDispatcher

from raytf.driver import ray_lines

pytestmark = pytest.mark.unit

KILL = (
    "[2026-12-04 18:02:11,123 E 4242 4242] gcs_actor_manager.cc:1234: Failed to kill actor "
    "0a1b2c, status: RpcError: RPC Error message: Socket closed; RPC Error details:"
)


def dispatcher_printing_to(printed: list):
    d = WorkerStandardStreamDispatcher()
    d.add_handler("ray_print_logs", lambda data: printed.append((data["pid"], data["lines"])))
    d.add_handler("other", lambda data: printed.append(("other", data["lines"])))
    return d


def test_a_gcs_kill_note_is_held_back_and_every_other_line_printed():
    printed = []
    d = dispatcher_printing_to(printed)
    assert ray_lines.install(d) and ray_lines.install(d)  # once, however often called
    d.emit({"pid": "gcs_server", "lines": [KILL]})
    d.emit({"pid": "gcs_server", "lines": ["a real GCS error", KILL]})
    d.emit({"pid": 4242, "lines": [KILL]})  # a worker saying it: not Ray's teardown note
    assert printed == [
        ("other", [KILL]),  # other handlers see the stream unchanged
        ("gcs_server", ["a real GCS error"]),
        ("other", ["a real GCS error", KILL]),
        (4242, [KILL]),
        ("other", [KILL]),
    ]


def test_without_rays_print_handler_nothing_is_changed():
    d = WorkerStandardStreamDispatcher()
    assert not ray_lines.install(d)
    assert d.handlers == []
