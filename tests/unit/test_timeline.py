"""The start-up timeline: stamps in, seconds after the driver's start out (no Ray needed)."""

import os
import time

from raytf.bench.harness import startup_from
from raytf.group.timeline import Timeline
from raytf.worker.process.startup import process_start_time


def test_this_process_started_before_now_and_after_boot():
    started = process_start_time()
    assert started is not None and time.time() - 3600 * 24 * 365 < started <= time.time()
    assert process_start_time(os.getppid()) <= started + 0.05  # a parent starts first (10 ms ticks)
    assert process_start_time(999_999_999) is None


def test_the_summary_takes_the_slowest_rank_of_each_phase():
    timeline = Timeline()
    timeline.origin = 100.0
    timeline.driver = {"placed": 101.0, "loops_started": 104.0}
    assert timeline.add_rank(0, {"tf_imported": 102.0, "first_step": 105.0})
    assert timeline.add_rank(1, {"tf_imported": 103.5, "first_step": 105.5})
    assert not timeline.add_rank(1, {"tf_imported": 0.0})  # the first answer stays
    assert not timeline.add_rank(2, None)
    out = timeline.summary()
    assert out["driver_started"] == 100.0 and out["placed"] == 1.0
    assert out["workers_tf_imported"] == 3.5 and out["workers_first_step"] == 5.5
    assert out["ranks"]["0"] == {"tf_imported": 2.0, "first_step": 5.0}
    # The bench puts it after the call that started the run.
    assert startup_from(out, t0=102.0)["workers_first_step"] == 3.5
