"""One measured run of one way, and the figures read off its workers' traces.

Timing is from outside every layer: ``e2e_s`` from just before the call that
starts the run (``Trainer.fit``, the MWMS launcher, ``TensorflowTrainer.fit``)
to its return, a running Ray cluster excluded; ``first_step_s`` from the same
start to rank 0's first finished step; ``step_ms`` the median of rank 0's
step times after a warm-up; ``loop_s`` the sum of them (what a checkpoint
interval adds to); ``rss_mb`` the largest peak resident memory of any worker
process; ``startup`` (raytf) the start-up timeline's phases after the same
start. A recovery run SIGKILLs rank 1's process from here once its trace
is ``kill_after_s`` into training, and ``recovery_s`` runs from the kill to rank 0's first
finished step after it.
"""

from __future__ import annotations

import os
import signal
import statistics
import tempfile
import threading
import time
import uuid

from raytf.bench import trace
from raytf.bench.ways import RUNNERS

WARMUP_STEPS = 16  # tracing, first collectives, allocator growth


class Killer(threading.Thread):
    """SIGKILLs a rank's process ``after_s`` into its training: a crash from outside.

    Not in the first seconds: a crash in a long run comes long after start-up,
    when raytf's standby processes have TensorFlow imported (5-7 s after the
    first step). The kill lands on the first step mark past that time.
    """

    def __init__(self, trace_dir: str, rank: int, after_s: float):
        super().__init__(daemon=True, name="bench-killer")
        self.trace_dir, self.rank, self.after_s = trace_dir, rank, after_s
        self.killed_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.02):
            steps = [e for e in trace.read(self.trace_dir, self.rank) if e["event"] == "step"]
            hit = [e for e in steps if e["t"] >= steps[0]["t"] + self.after_s]
            if hit:
                self.killed_at = time.time()
                os.kill(hit[0]["pid"], signal.SIGKILL)
                return


def _steps_at(end: dict, every: int, first_index: int = WARMUP_STEPS) -> list[float]:
    """The times of the attempt's steps that are multiples of ``every``, from ``first_index``."""
    first = end["after"] + 1
    times = end["step_s"]
    return [times[i] for i in range(first_index, len(times)) if (first + i) % every == 0]


def figures(
    trace_dir: str,
    workers: int,
    t0: float,
    t1: float,
    killed_at: float | None = None,
    every: int | None = None,
    report_every: int | None = None,
) -> dict:
    ranks = [trace.read(trace_dir, r) for r in range(workers)]
    chief = ranks[0]
    ends = [next(e for e in reversed(events) if e["event"] == "end") for events in ranks]
    steps = [e for e in chief if e["event"] == "step"]
    step_s = ends[0]["step_s"][WARMUP_STEPS:]
    median = statistics.median(step_s)
    out = {
        "e2e_s": t1 - t0,
        "first_step_s": steps[0]["t"] - t0,
        "step_ms": 1000 * median,
        "loop_s": sum(step_s),
        "rss_mb": max(e["rss_mb"] for e in ends),
        "digests_agree": len({e["weights_digest"] for e in ends}) == 1,
        "final_loss": ends[0]["loss"],
    }
    # After the last step: the loop's return (its locals freed), then the layer's own end.
    returned = [e["t"] for events in ranks for e in events if e["event"] == "returned"]
    if returned:
        out["return_s"] = max(returned) - max(e["t"] for e in ends)
        out["wind_down_s"] = t1 - max(returned)
    if every:
        # Within the run: what the steps that saved took beyond a median step. An
        # attempt's first save pays one-time costs (raytf traces its save function)
        # and is shown apart; the later ones are what a long run pays every interval.
        saved = _steps_at(ends[0], every, first_index=0)
        if saved:
            out["first_save_ms"] = 1000 * (saved[0] - median)
        if len(saved) > 1:
            out["ckpt_excess_pct"] = 100 * sum(t - median for t in saved[1:]) / sum(step_s)
    elif report_every:
        # What a metrics report costs the loop: reporting steps beyond a median step.
        reported = _steps_at(ends[0], report_every)
        if reported:
            out["report_ms"] = 1000 * statistics.mean(t - median for t in reported)
    if killed_at is not None:
        after = [e for e in steps if e["t"] > killed_at]
        resumed = [e for e in chief if e["event"] == "start" and e["t"] > killed_at]
        out["recovery_s"] = after[0]["t"] - killed_at
        out["resumed_after"] = resumed[0]["after"] if resumed else None
    return out


def measure(
    way: str,
    config: dict,
    *,
    workers: int,
    use_gpu: bool,
    storage: str,
    checkpoint_every: int | None = None,
    kill_after_s: float | None = None,
) -> dict:
    """Run ``way`` once; the figures of that run."""
    trace_dir = tempfile.mkdtemp(prefix=f"trace-{way}-", dir=storage)
    killer = Killer(trace_dir, rank=1, after_s=kill_after_s) if kill_after_s else None
    if killer:
        killer.start()
    t0 = time.time()
    extra: dict | None = None
    try:
        extra = RUNNERS[way](
            {**config, "trace_dir": trace_dir},
            workers,
            use_gpu,
            storage=storage,
            name=f"{way}-{uuid.uuid4().hex[:8]}",
            checkpoint_every=checkpoint_every,
            max_failures=1 if killer else 0,
        )
    finally:
        t1 = time.time()
        if killer:
            killer.stop.set()
    if killer and killer.killed_at is None:
        raise RuntimeError(f"{way}: the run ended before {kill_after_s} s: nothing was killed")
    killed_at = killer.killed_at if killer else None
    out = figures(
        trace_dir, workers, t0, t1, killed_at, checkpoint_every, config.get("report_every")
    )
    if extra and extra.get("startup"):
        out["startup"] = startup_from(extra["startup"], t0)
    return out


def startup_from(timeline: dict, t0: float) -> dict[str, float]:
    """A run's start-up timeline (``state.json``'s ``startup``) as seconds after ``t0``,
    the call that started the run: the phases of the last attempt, slowest rank."""
    origin = timeline["driver_started"]
    return {
        k: origin + v - t0
        for k, v in timeline.items()
        if k != "driver_started" and isinstance(v, (int, float))
    }
