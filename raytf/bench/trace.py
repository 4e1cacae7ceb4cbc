"""What each worker process writes down while it trains, for the harness to read.

One JSON line per event in ``trace_dir/rank<R>.jsonl``, appended and flushed:
``start`` (pid, the step resumed after) when the loop begins, ``step`` for the
first step of each attempt and every ``mark_every`` steps after (the harness
kills a worker on these), ``end`` with the step times of the attempt that
finished and the process's peak resident memory, ``returned`` once the
loop's function has returned (freeing its input iterator). Times are ``time.time()``:
the harness and all workers share one machine's clock.

Per-step times are kept in memory and written once at the end, so tracing
costs a ``perf_counter`` call per step, not a write.
"""

from __future__ import annotations

import json
import os
import resource
import time


def peak_rss_mb() -> float:
    """This process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Trace:
    def __init__(self, trace_dir: str | None, rank: int, mark_every: int = 16):
        self.path = os.path.join(trace_dir, f"rank{rank}.jsonl") if trace_dir else None
        self.mark_every = mark_every
        self._ticks: list[float] = []
        self._first: int | None = None
        self._after = 0

    def _write(self, doc: dict) -> None:
        if self.path is None:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(doc) + "\n")

    def started(self, resumed_after: int) -> None:
        self._ticks = [time.perf_counter()]
        self._first = None
        self._after = resumed_after
        self._write(
            {"event": "start", "pid": os.getpid(), "after": resumed_after, "t": time.time()}
        )

    def step(self, step: int) -> None:
        self._ticks.append(time.perf_counter())
        if self._first is None or step % self.mark_every == 0:
            self._write({"event": "step", "step": step, "pid": os.getpid(), "t": time.time()})
        if self._first is None:
            self._first = step

    def finished(self, out: dict) -> None:
        ticks = self._ticks
        step_s = [b - a for a, b in zip(ticks, ticks[1:])]
        self._write(
            {
                "event": "end",
                "t": time.time(),
                "after": self._after,  # step_s[i] is step after + 1 + i
                "step_s": step_s,
                "rss_mb": peak_rss_mb(),
                **out,
            }
        )

    def returned(self) -> None:
        """The loop's function has returned: its locals (the input iterator) are freed."""
        self._write({"event": "returned", "t": time.time()})


def read(trace_dir: str, rank: int) -> list[dict]:
    path = os.path.join(trace_dir, f"rank{rank}.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]
