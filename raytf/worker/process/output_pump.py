"""The process between a worker's output and Ray's log file: every line kept, notes held back.

Run as a script by ``raytf.worker.process.output`` (standard library only: it must
start in milliseconds and import nothing the worker's environment may lack),
one per stream, reading the pipe the worker's fd 1 or 2 now writes to. It is
a process, not a thread of the worker, for three reasons: it drains the pipe
after the worker dies (a C++ ``Check failed`` line before ``abort()``, a
segfault's traceback), it needs no GIL (native code that holds it while
logging cannot block on a full pipe), and a bug in it cannot hang training.
It exits at end of file, when every writer (the worker and its children) is
gone.

Each line goes to Ray's file (which Ray forwards to the driver's screen)
unless ``is_startup_noise`` holds it back, and to the keep file the worker's
poll reads for ``RUN_DIR/logs``. The worker tells it the log level and
whether it has GPUs by a control line, in order with its output.
"""

from __future__ import annotations

import os
import re
import select
import sys
import time

CONTROL = "\x00raytf-output "  # + "tf_level=1 gpus=0": settings, never shown or kept
KEEP_LIMIT = 256 << 20  # bytes kept per stream for the driver; Ray's own file has the rest
PARTIAL_S = 0.5  # a line without its newline yet (a \r progress bar) goes on after this

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


def is_startup_noise(line: str, *, tf_level: int, has_gpus: bool) -> bool:
    """Whether ``line`` is one of TF's notes that ``TF_CPP_MIN_LOG_LEVEL=tf_level`` hides
    once TF reads it: INFO from 1, WARNING from 2, ERROR from 3 (TF's own meaning).

    Level 0 shows everything. The cuInit error is an error only where the worker has
    GPUs: on a CPU-only worker it says that no GPU was found, which the job asked for.
    """
    if tf_level <= 0:
        return False
    text = line.strip()
    if text.startswith((_PRE_INIT, _CPU_GUARD_TAIL)):
        return True
    match = _ABSL.match(text)
    if match is None:
        return False
    if _CUINIT in text and not has_gpus:
        return True
    if any(h in text for h in _HARMLESS):
        return True
    return _LEVELS[match.group(1)] < tf_level


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass  # Ray's file gone (a full disk, shutdown): the keep file still has the line


class Pump:
    def __init__(self, read_fd: int, out_fd: int, keep_path: str, tf_level: int):
        self.read_fd, self.out_fd, self.keep_path = read_fd, out_fd, keep_path
        self.tf_level, self.has_gpus = tf_level, False
        self.keep = open(keep_path, "ab")
        self.kept = 0

    def _control(self, text: str) -> None:
        for item in text[len(CONTROL) :].split():
            key, _, value = item.partition("=")
            if key == "tf_level" and value.lstrip("-").isdigit():
                self.tf_level = int(value)
            elif key == "gpus":
                self.has_gpus = value == "1"

    def line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace")
        if text.startswith(CONTROL):
            self._control(text)
            return
        if self.kept < KEEP_LIMIT:
            self.keep.write(raw if raw.endswith(b"\n") else raw + b"\n")
            self.kept += len(raw)
        if not is_startup_noise(text, tf_level=self.tf_level, has_gpus=self.has_gpus):
            _write_all(self.out_fd, raw)

    def run(self) -> None:
        pending, since = b"", 0.0
        poller = select.poll()
        poller.register(self.read_fd, select.POLLIN | select.POLLHUP)
        while True:
            if poller.poll(PARTIAL_S * 1000):
                chunk = os.read(self.read_fd, 1 << 16)
                if not chunk:
                    break
                if not pending:
                    since = time.monotonic()
                pending += chunk
                *whole, pending = pending.split(b"\n")
                for raw in whole:
                    self.line(raw + b"\n")
                if whole and pending:
                    since = time.monotonic()
            if pending and time.monotonic() - since >= PARTIAL_S:
                self.line(pending)
                pending = b""
            self.keep.flush()
        if pending:
            self.line(pending)
        self.keep.close()
        os.unlink(self.keep_path)  # every writer is gone: nobody reads it any more


def main(argv: list[str]) -> None:
    read_fd, out_fd, keep_path, tf_level = int(argv[0]), int(argv[1]), argv[2], int(argv[3])
    try:
        Pump(read_fd, out_fd, keep_path, tf_level).run()
    except Exception as exc:  # noqa: BLE001 - never leave the worker writing to a full pipe
        _write_all(out_fd, f"raytf output pump: {exc!r}; passing output through\n".encode())
        while chunk := os.read(read_fd, 1 << 16):
            _write_all(out_fd, chunk)


if __name__ == "__main__":
    main(sys.argv[1:])
