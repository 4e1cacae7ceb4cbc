"""A worker's output: every line kept for the run directory, TF's start-up notes off the screen.

TensorFlow prints its start-up notes (oneDNN, "Could not find cuda drivers",
the CPU-feature guard, and on a CPU-only job "failed call to cuInit") from
C++ before absl's logging is initialised, where ``TF_CPP_MIN_LOG_LEVEL`` is
not yet read (TF 2.21): every rank prints them, twice, and nothing in the
environment stops it. So the process's own file descriptors 1 and 2 are
piped through a thread here, installed before TensorFlow is imported: each
line is kept for the driver's poll (``RUN_DIR/logs/rank_<R>.log`` gets the
whole output) and passed on to the descriptor Ray reads, which forwards it to
the driver's screen, unless ``is_startup_noise`` says it is a note the
user's log level asked not to see. Each line passes once, in order within
its stream (stdout and stderr are a pipe each).

A process killed with SIGKILL loses what the thread had not yet passed on
(it reads continuously: at most the last fraction of a second).
"""

from __future__ import annotations

import os
import re
import select
import threading
import time
from collections import deque
from collections.abc import Callable

from ray._private.ray_constants import LOG_PREFIX_ACTOR_NAME, LOG_PREFIX_TASK_NAME

# glog/absl's line prefix: severity, date, time (before absl is initialised, "00:00:"
# and the seconds since 1970), thread id, file:line]
_ABSL = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w.\-/]+:\d+\] ")
_LEVELS = {"I": 0, "W": 1, "E": 2, "F": 3}
_PRE_INIT = "WARNING: All log messages before absl::InitializeLog() is called"
_CPU_GUARD_TAIL = "To enable the following instructions:"
_CUINIT = "failed call to cuInit"
# Warnings TF gives on every run that ask nothing of the user: a common pipeline's, and
# the SIGTERM of the group's own teardown (a real one is raytf's termination notice).
_HARMLESS = ("GeneratorDatasetOp::Dataset will not be optimized", "] SIGTERM caught at ")
_KEEP_LINES = 20_000  # held for the driver between polls; the oldest go first
_PARTIAL_S = 0.5  # a line without its newline yet (a \r progress bar) is passed on after this


def is_startup_noise(line: str, *, tf_level: int, has_gpus: bool) -> bool:
    """Whether ``line`` is one of TF's notes that ``TF_CPP_MIN_LOG_LEVEL=tf_level`` hides
    once TF reads it: INFO from 1, WARNING from 2, ERROR from 3 (TF's own meaning).

    Level 0 shows everything. The cuInit error is an error only where the worker has
    GPUs: on a CPU-only worker it says that no GPU was found, which the job asked for.
    """
    if tf_level <= 0:
        return False
    text = line.strip()
    if text.startswith(_PRE_INIT) or text.startswith(_CPU_GUARD_TAIL):
        return True
    match = _ABSL.match(text)
    if match is None:
        return False
    if _CUINIT in text and not has_gpus:
        return True
    if any(h in text for h in _HARMLESS):
        return True
    return _LEVELS[match.group(1)] < tf_level


def tf_level(environ=None) -> int:
    """The TF_CPP_MIN_LOG_LEVEL in force (raytf's workers default to 1)."""
    raw = (os.environ if environ is None else environ).get("TF_CPP_MIN_LOG_LEVEL", "0")
    try:
        return int(raw)
    except ValueError:
        return 0


class OutputTap:
    """Fds 1 and 2 through a pipe each; ``drain()`` hands the driver the lines since the last."""

    def __init__(self, show: Callable[[str], bool]):
        self._show = show
        self._lines: deque[str] = deque(maxlen=_KEEP_LINES)
        self._lock = threading.Lock()
        for fd in (1, 2):
            read_end, write_end = os.pipe()
            original = os.dup(fd)
            os.dup2(write_end, fd)
            os.close(write_end)
            threading.Thread(
                target=self._pump, args=(read_end, original), daemon=True, name=f"raytf-out{fd}"
            ).start()

    def drain(self, limit: int = 2000) -> list[str]:
        with self._lock:
            n = min(limit, len(self._lines))
            return [self._lines.popleft() for _ in range(n)]

    def _pump(self, read_end: int, original: int) -> None:
        pending = b""
        since = 0.0
        while True:
            ready, _, _ = select.select([read_end], [], [], _PARTIAL_S)
            if ready:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    break
                if not pending:
                    since = time.monotonic()
                pending += chunk
            *whole, pending = pending.split(b"\n")
            for raw in whole:
                self._line(raw + b"\n", original)
            if pending and time.monotonic() - since >= _PARTIAL_S:
                self._line(pending, original)
                pending = b""

    def _line(self, raw: bytes, original: int) -> None:
        text = raw.decode("utf-8", "replace")
        if not text.startswith((LOG_PREFIX_ACTOR_NAME, LOG_PREFIX_TASK_NAME)):  # Ray's markers
            with self._lock:
                self._lines.append(text.rstrip("\n"))
        try:
            if self._show(text):
                os.write(original, raw)
        except Exception:  # noqa: BLE001 - output must never kill the process
            os.write(original, raw)
