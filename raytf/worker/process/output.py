"""A worker's output: every line kept for the run directory, TF's start-up notes off the screen.

TensorFlow prints its start-up notes (oneDNN, "Could not find cuda drivers",
the CPU-feature guard, and on a CPU-only job "failed call to cuInit") from
C++ before absl's logging is initialised, where ``TF_CPP_MIN_LOG_LEVEL`` is
not yet read (TF 2.21): every rank printed them, twice, and nothing in the
environment stops it. So the worker's fds 1 and 2 become pipes, installed
before TensorFlow is imported, each read by a small process of its own
(``raytf.worker.process.output_pump``) that passes each line on to the file Ray
forwards to the driver's screen, unless it is a note the log level hides, and
keeps every line in a file the worker's poll reads (``RUN_DIR/logs``). Each
line passes once, in order within its stream; what a dying worker wrote last
still reaches the screen (the pump drains the pipe after the worker is gone).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile

from ray._private import ray_constants

from raytf.worker.process import output_pump
from raytf.worker.process.output_pump import CONTROL

LINE_BYTES = 16 << 10  # a longer line reaches the run directory cut to this
POLL_BYTES = 1 << 20  # what one poll carries at most; the rest waits for the next
_PIPE_BYTES = 1 << 20  # room in each pipe (Linux's default is 64 KiB)
_RAY_MARKERS = tuple(  # those this Ray has (raytf.compat probes them)
    marker
    for name in ("ACTOR_NAME", "TASK_NAME", "JOB_ID", "EVENT_SUMMARY")
    if isinstance(marker := getattr(ray_constants, f"LOG_PREFIX_{name}", None), str)
)


def tf_level(environ=None) -> int:
    """The TF_CPP_MIN_LOG_LEVEL in force (raytf's workers default to 1)."""
    raw = (os.environ if environ is None else environ).get("TF_CPP_MIN_LOG_LEVEL", "0")
    try:
        return int(raw)
    except ValueError:
        return 0


class OutputTap:
    """Fds 1 and 2 through a pump process each; ``drain()`` hands the driver the new lines."""

    def __init__(self):
        self._keep: list[list] = []  # [keep file open for reading, bytes taken] per stream
        self.pumps: list[subprocess.Popen] = []
        level = str(tf_level())
        for fd in (1, 2):
            read_end, write_end = os.pipe()
            try:
                fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
            except OSError:
                pass  # a smaller pipe only means the writer waits on the pump sooner
            original = os.dup(fd)
            handle, keep = tempfile.mkstemp(prefix=f"raytf-out-{os.getpid()}-{fd}-")
            self.pumps.append(
                subprocess.Popen(
                    [sys.executable, "-S", output_pump.__file__, str(read_end), str(original)]
                    + [keep, level],
                    pass_fds=(read_end, original),
                    stdin=subprocess.DEVNULL,
                    stdout=original,
                    stderr=original,
                    start_new_session=True,  # outlives the worker: drains what it wrote last
                )
            )
            os.close(read_end)
            os.close(original)
            os.dup2(write_end, fd)
            os.close(write_end)
            self._keep.append([os.fdopen(handle, "rb"), 0])  # read here, appended by the pump

    def settings(self, *, tf_level: int, has_gpus: bool) -> None:
        """Tell both pumps, in order with the output before it (a promoted worker's GPUs)."""
        line = f"{CONTROL}tf_level={tf_level} gpus={int(has_gpus)}\n".encode()
        for fd in (1, 2):
            os.write(fd, line)

    def drain(self) -> list[str]:
        """The lines kept since the last call, stdout's then stderr's."""
        lines: list[str] = []
        budget = POLL_BYTES
        for keep in self._keep:
            f, offset = keep
            f.seek(offset)
            data = f.read(max(budget, 0))
            whole = data[: data.rfind(b"\n") + 1]  # a line still being written waits
            if not whole and budget and len(data) >= budget:
                whole = data  # one line longer than a poll carries: cut here
            keep[1] = offset + len(whole)
            budget -= len(whole)
            for raw in whole.splitlines():
                text = raw[:LINE_BYTES].decode("utf-8", "replace")
                if not text.startswith(_RAY_MARKERS):  # Ray's own, for its log monitor
                    lines.append(text)
        return lines
