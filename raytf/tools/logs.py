"""``raytf logs RUN_DIR``: each rank's whole output, read from the run directory.

The driver's screen shows what workers print, but not TensorFlow's start-up
notes and not a run the operator did not start; the rank logs under
``RUN_DIR/logs/`` have everything, on any node and after the cluster is gone.
Reading goes through Storage, so a run on an object store is followed too:
there an object cannot be appended to, so each poll reads it again and
prints what is past the part already printed.
"""

from __future__ import annotations

import codecs
import re
import time
from collections.abc import Callable
from typing import TextIO

from raytf.driver.states import State
from raytf.rundir.run_log import LOGS_DIR
from raytf.rundir.run_state import STATE_FILE
from raytf.rundir.storage import Storage

POLL_S = 0.5
QUIET_S = 2.0  # after the run ended, this long without a new line and following stops
# On an object store the driver uploads a log whole every 10 s and last after state.json says
# the run ended: wait past one upload, or its last lines are missed.
REMOTE_QUIET_S = 12.0
_utf8 = codecs.getincrementaldecoder("utf-8")
_LOG_RE = re.compile(r"^rank_(\d+)\.log$")


def rank_logs(storage: Storage) -> dict[int, str]:
    """rank -> file name, for every rank log there is."""
    found = {}
    for name in storage.listdir(LOGS_DIR):
        m = _LOG_RE.match(name)
        if m:
            found[int(m.group(1))] = name
    return dict(sorted(found.items()))


def _read_from(storage: Storage, name: str, offset: int) -> bytes:
    path = storage.path(LOGS_DIR, name)
    if storage.local:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read()
    return storage.fs.cat_file(path)[offset:]  # the whole object again: it was rewritten


def _prefix(rank: int, prefixed: bool) -> str:
    return f"(rank {rank}) " if prefixed else ""


def print_logs(storage: Storage, ranks: list[int], out: TextIO, prefixed: bool) -> None:
    """Each rank's file whole, one after another, in rank order."""
    names = rank_logs(storage)
    for rank in ranks:
        with storage.fs.open(storage.path(LOGS_DIR, names[rank]), "rb") as f:
            for raw in f:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                out.write(f"{_prefix(rank, prefixed)}{line}\n")
    out.flush()


def run_ended(storage: Storage) -> bool:
    try:
        state = storage.read_json(STATE_FILE).get("state")
        return state in {s.value for s in State if s.is_terminal}  # the driver's own list
    except (OSError, ValueError, AttributeError):
        return False


class Follower:
    """What each rank's file has printed so far: an offset, and a line not yet whole."""

    def __init__(self, storage: Storage, ranks: list[int] | None, out: TextIO, prefixed: bool):
        self.storage, self.ranks, self.out, self.prefixed = storage, ranks, out, prefixed
        self.offsets: dict[int, int] = {}
        self.partial: dict[int, str] = {}
        self.decoders: dict[int, codecs.IncrementalDecoder] = {}  # a character cut in two

    def poll(self) -> bool:
        """Print every new whole line (a rank whose file appeared since is read too);
        True if any file grew."""
        grew = False
        for rank, name in rank_logs(self.storage).items():
            if self.ranks is not None and rank not in self.ranks:
                continue
            data = _read_from(self.storage, name, self.offsets.get(rank, 0))
            if not data:
                continue
            grew = True
            self.offsets[rank] = self.offsets.get(rank, 0) + len(data)
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
