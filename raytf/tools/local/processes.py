"""The processes of a simulated node: is one alive, which are left, when to stop waiting.

A node is a ``ray start --block`` process leading its own session, and every Ray
process of the node runs in that session's process group. Stopping it sends SIGTERM
to the group, then SIGKILL to what still runs. Waiting between the two for
``ray start`` to exit was a fixed 5 s: measured on Ray 2.60, the daemons that exit on
SIGTERM do so within 0.5 s, while ``ray start --block``, the GCS, the raylet and the
runtime-env agent never exit on it. So the wait ends once the group stops shrinking.
"""

from __future__ import annotations

import os
import time

SETTLED_S = 1.0  # no process of the groups exited for this long: the rest will not
POLL_S = 0.1


def _stat(pid: int | str) -> list[str] | None:
    """``/proc/PID/stat``'s fields after the command name, the state first (``Z``: a
    zombie) and the process group third; None once it is gone, or without ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """Running, and not a zombie (an orphaned node's parent may never reap it)."""
    fields = _stat(pid)
    if fields is not None:
        return fields[0] != "Z"
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_members(pgids: set[int]) -> set[int] | None:
    """The live (non-zombie) pids in these process groups; None without ``/proc``."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    members = set()
    for pid in pids:
        fields = _stat(pid)  # None: it exited while listed
        if fields is not None and fields[0] != "Z" and int(fields[2]) in pgids:
            members.add(int(pid))
    return members


def wait_settled(pgids: set[int], limit_s: float) -> None:
    """Return once no process is left in ``pgids``, or none has exited for
    ``SETTLED_S``, or after ``limit_s`` (also the whole wait where there is no ``/proc``)."""
    deadline = time.monotonic() + limit_s
    left = group_members(pgids)
    if left is None:
        time.sleep(limit_s)
        return
    changed = time.monotonic()
    while left and time.monotonic() < min(deadline, changed + SETTLED_S):
        time.sleep(POLL_S)
        now = group_members(pgids) or set()
        if now != left:
            left, changed = now, time.monotonic()
