"""Driver-side callbacks run on a thread of their own: the control loop only enqueues."""

import threading
import time

import pytest

import raytf
from raytf import Callback, ConfigError, RunConfig
from raytf.driver.callbacks import DriverCallbacks


class Recorder(Callback):
    def __init__(self, gate=None):
        self.events = []
        self.gate = gate

    def on_report(self, metrics):
        if self.gate is not None:
            self.gate.wait()
        self.events.append(("report", metrics["step"]))

    def on_state(self, old, new):
        self.events.append(("state", old, new))

    def on_restart(self, attempt):
        self.events.append(("restart", attempt))

    def on_run_end(self, state):
        self.events.append(("end", state))


class Broken(Callback):
    def on_report(self, metrics):
        raise RuntimeError("bug in a callback")


def test_a_blocked_callback_never_blocks_emit_and_sees_every_event_in_order():
    gate = threading.Event()
    recorder = Recorder(gate)
    runner = DriverCallbacks([Broken(), recorder])
    t0 = time.monotonic()
    for step in range(100):
        runner.emit("on_report", {"step": step})
    runner.state("RUNNING", "RESTARTING", 1)
    runner.state("RESTARTING", "SCHEDULING", 1)
    assert time.monotonic() - t0 < 0.5 and recorder.events == []
    runner.emit("on_poll", 1, object())  # raytf's own record keepers' event: skipped here
    gate.set()
    runner.close("FINISHED")
    assert recorder.events[:100] == [("report", s) for s in range(100)]
    assert recorder.events[100:] == [
        ("state", "RUNNING", "RESTARTING"),
        ("state", "RESTARTING", "SCHEDULING"),
        ("restart", 2),
        ("end", "FINISHED"),
    ]


def test_no_callbacks_no_thread():
    runner = DriverCallbacks([])
    runner.emit("on_report", {"step": 1})
    runner.close("FINISHED")
    assert runner._thread is None


def test_run_config_refuses_what_is_not_a_callback():
    with pytest.raises(ConfigError, match="is not a raytf.Callback") as refused:
        RunConfig(callbacks=[print])
    # The message names every hook a Callback has, the last one included.
    hooks = [name for name in vars(raytf.Callback) if name.startswith("on_")]
    assert "on_run_end" in hooks and all(name in str(refused.value) for name in hooks)
    assert RunConfig(callbacks=[Recorder()]).callbacks[0].events == []
