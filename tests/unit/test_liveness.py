"""A worker's own progress signal: ticks, silent phases and which variables count steps."""

import threading
import time
import weakref
from types import SimpleNamespace

from raytf.messages import Phase
from raytf.worker.liveness import Liveness, is_step_counter


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_phases_report_their_age_and_ending_one_is_progress():
    clock = Clock()
    live = Liveness(clock)
    with live.phase("restore"):
        clock.now = 7.5
        with live.phase("mine", limit_s=30.0):
            clock.now = 9.0
            ticks, phases = live.view()
            assert ticks == 0
            assert phases == (Phase("restore", 9.0, None), Phase("mine", 1.5, 30.0))
    assert live.view() == (2, ())


def test_a_phase_until_progress_ends_at_the_first_progress_inside_it():
    clock = Clock()
    live = Liveness(clock)
    with live.phase("fit's first step", until_progress=True):
        key = live.open("evaluate")
        live.progressed()  # the first optimizer step: the trace is over, evaluate is not
        assert [p.name for p in live.view()[1]] == ["evaluate"]
        live.close(key)
    assert live.view() == (2, ())


def _var(name, dtype="int64", rank=0):
    return SimpleNamespace(
        name=name, dtype=SimpleNamespace(name=dtype), shape=SimpleNamespace(rank=rank)
    )


def test_step_counters_are_keras_and_tf_keras_optimizer_iterations():
    for name in ("iteration:0", "adam/iteration:0", "SGD/iter:0", "iteration_1:0", "iterations"):
        assert is_step_counter(_var(name)), name
    assert not is_step_counter(_var("iteration:0", dtype="float32"))
    assert not is_step_counter(_var("iteration:0", rank=1))
    assert not is_step_counter(_var("dense/kernel:0"))
    assert not is_step_counter(_var("raytf_step:0"))
    assert not is_step_counter(object())


def test_progress_restarts_the_clock_of_a_phase_that_stays_open():
    """A phase's age is how long it has been silent: heartbeats inside a long evaluate
    keep it alive, as they did before phases existed."""
    clock = Clock()
    live = Liveness(clock)
    with live.phase("evaluate"):
        clock.now = 100.0
        live.progressed()
        clock.now = 130.0
        assert live.view()[1] == (Phase("evaluate", 30.0, None),)


class Counter:
    """A step counter's stand-in: ``numpy()`` reads it."""

    def __init__(self):
        self.value = 0

    def numpy(self):
        return self.value


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_counters_set_by_a_restore_are_a_new_baseline_not_progress():
    """On a resumed attempt the restore sets each step counter to the step resumed from:
    that must not end the start-up phase (a custom loop's first trace comes after it)."""
    live = Liveness(sample_s=0.005)
    counter = Counter()
    live._counters.append(weakref.ref(counter))
    start = live.open("start-up", until_progress=True)
    sampler = threading.Thread(target=live._sample, daemon=True)
    sampler.start()
    try:
        with live.phase("restore", quiet=True):
            counter.value = 120
            time.sleep(0.05)
        time.sleep(0.05)  # reads after the restore: the restored value, a baseline
        ticks, phases = live.view()
        assert ticks == 1 and [p.name for p in phases] == ["start-up"]  # the restore's end
        counter.value = 121  # the first step after the restore
        wait_for(lambda: live.view() == (2, ()))
    finally:
        live._stop.set()
        live.close(start)


def test_allow_gives_the_phases_open_now_more_time_and_only_those():
    clock = [0.0]
    live = Liveness(clock=lambda: clock[0])
    key = live.open("fit's first step (trace or compile)", until_progress=True)
    live.allow(120.0)
    later = live.open("evaluate")
    clock[0] = 5.0
    _, phases = live.view()
    assert [(p.name, p.extra_s) for p in phases] == [
        ("fit's first step (trace or compile)", 120.0),
        ("evaluate", 0.0),
    ]
    live.close(key)
    live.close(later)
