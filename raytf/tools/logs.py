"""``raytf logs RUN_DIR``: each rank's whole output, read from the run directory.

The driver's screen shows what workers print, but not TensorFlow's start-up
notes and not a run the operator did not start; the rank logs under
``RUN_DIR/logs/`` have everything, on any node and after the cluster is gone.
Reading goes through Storage, so a run on an object store is followed too:
there a log is a series of segments (``raytf.rundir.segments``), and each poll
fetches only the segments it has not printed.
"""

from __future__ import annotations

import codecs
import re
import time
from collections.abc import Callable
from typing import TextIO

from raytf.driver.states import State
from raytf.rundir import segments
from raytf.rundir.run_log import LOGS_DIR, rank_log_name
from raytf.rundir.run_state import STATE_FILE
from raytf.rundir.storage import Storage

POLL_S = 0.5
QUIET_S = 2.0  # after the run ended, this long without a new line and following stops
# On an object store the driver uploads what a log gained every 10 s, and last after
# state.json says the run ended: wait past one upload, or its last lines are missed.
REMOTE_QUIET_S = 12.0
_utf8 = codecs.getincrementaldecoder("utf-8")
_LOG_RE = re.compile(r"^rank_(\d+)\.log(\.parts)?$")


def rank_logs(storage: Storage) -> dict[int, str]:
    """rank -> file name, for every rank log there is (whole, or in segments)."""
    found = {}
    for name in storage.listdir(LOGS_DIR):
        m = _LOG_RE.match(name)
        if m:
            found[int(m.group(1))] = rank_log_name(int(m.group(1)))
    return dict(sorted(found.items()))


def _prefix(rank: int, prefixed: bool) -> str:
    return f"(rank {rank}) " if prefixed else ""


def print_logs(storage: Storage, ranks: list[int], out: TextIO, prefixed: bool) -> None:
    """Each rank's file whole, one after another, in rank order."""
    names = rank_logs(storage)
    for rank in ranks:
        text = segments.read(storage, LOGS_DIR, names[rank]).decode("utf-8", errors="replace")
        lines = text.split("\n")
        for line in lines[:-1] if lines[-1] == "" else lines:  # "\r" stays in its line
            out.write(f"{_prefix(rank, prefixed)}{line}\n")
    out.flush()


def run_ended(storage: Storage) -> bool:
    try:
        state = storage.read_json(STATE_FILE).get("state")
        return state in {s.value for s in State if s.is_terminal}  # the driver's own list
    except (OSError, ValueError, AttributeError):
        return False


class Follower:
    """What each rank's file has printed so far: a position, and a line not yet whole."""

    def __init__(self, storage: Storage, ranks: list[int] | None, out: TextIO, prefixed: bool):
        self.storage, self.ranks, self.out, self.prefixed = storage, ranks, out, prefixed
        self.positions: dict[int, segments.Position] = {}
        self.partial: dict[int, str] = {}
        self.decoders: dict[int, codecs.IncrementalDecoder] = {}  # a character cut in two

    def poll(self) -> bool:
        """Print every new whole line (a rank whose file appeared since is read too);
        True if any file grew."""
        grew = False
        for rank, name in rank_logs(self.storage).items():
            if self.ranks is not None and rank not in self.ranks:
                continue
            position = self.positions.setdefault(rank, segments.Position())
            data = segments.read_new(self.storage, position, LOGS_DIR, name)
            if not data:
                continue
            grew = True
            decoder = self.decoders.setdefault(rank, _utf8(errors="replace"))
            text = self.partial.pop(rank, "") + decoder.decode(data)
            *lines, rest = text.split("\n")
            if rest:
                self.partial[rank] = rest
            for line in lines:
                self.out.write(f"{_prefix(rank, self.prefixed)}{line}\n")
        self.out.flush()
        return grew

    def flush(self) -> None:
        for rank, rest in sorted(self.partial.items()):
            self.out.write(f"{_prefix(rank, self.prefixed)}{rest}\n")
        self.partial.clear()
        self.out.flush()


def follow(
    follower: Follower,
    *,
    poll_s: float = POLL_S,
    quiet_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Print what the ranks append, interleaved as it comes, until the run has ended and
    ``quiet_s`` passed without a new line."""
    if quiet_s is None:
        quiet_s = QUIET_S if follower.storage.local else REMOTE_QUIET_S
    last_new = clock()
    while True:
        if follower.poll():
            last_new = clock()
        elif clock() - last_new >= quiet_s and run_ended(follower.storage):
            follower.flush()
            return
        sleep(poll_s)
