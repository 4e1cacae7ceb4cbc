"""When this process started, and when each start-up phase of a worker ended.

A run's start-up is paid by whole processes (import, connect, spawn, import
TensorFlow, create MWMS, trace, first step), so each phase is stamped with
the wall clock (``time.time()``; nodes' clocks are NTP-synchronised, the
driver subtracts its own process start) and reported with the worker's polls
until the driver has the whole timeline (``raytf.group.timeline``).
"""

from __future__ import annotations

import os
import time

# Phases a worker stamps, in order.
WORKER_PHASES = ("process_start", "actor_ready", "tf_imported", "strategy_created", "first_step")


def process_start_time(pid: int | str = "self") -> float | None:
    """Wall time ``pid`` started (Linux ``/proc``: 10 ms resolution), or None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            after_name = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        started_after_boot = int(after_name[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (uptime - started_after_boot)


class WorkerTimes:
    """This worker's stamps; ``first_step`` comes from the context's first ``step_end``."""

    def __init__(self) -> None:
        self.stamps: dict[str, float] = {"actor_ready": time.time()}
        started = process_start_time()
        if started is not None:
            self.stamps["process_start"] = started

    def stamp(self, phase: str) -> None:
        self.stamps.setdefault(phase, time.time())
