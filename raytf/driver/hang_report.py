"""A hang, explained: where each rank was stuck, read before the group is torn down.

"no progress for 300 s" says that a run hung, not where. When the watchdog
fires, the controller hands its ``WorkerHangError`` here first: every rank's
stacks are read from outside the process (``raytf.group.stacks``: py-spy on
the worker's node, so a stopped or deadlocked worker is read too), the full
dumps go to ``stacks/attempt_<N>.txt`` in the run directory, and the error
that comes back carries a short excerpt per rank that matters: the silent
ranks, or every rank when none is silent (no progress: all of them are stuck
somewhere, most likely the same collective). It costs the restart 0.3-3 s
measured (a Ray task per rank, in parallel; 10 s at most, ``CAPTURE_TIMEOUT_S``).

Never raises: a capture or a write that fails becomes a line of the message,
and the error keeps its type (the failure policy classifies by type).
"""

from __future__ import annotations

import logging
import time

from raytf.errors import WorkerHangError
from raytf.group.stacks import CAPTURE_TIMEOUT_S, capture_stacks, excerpt, format_dumps
from raytf.messages import WorkerInfo
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")


def explain_hang(
    error: WorkerHangError,
    infos: list[WorkerInfo],
    storage: Storage,
    attempt: int,
    silent_ranks: list[int],
    timeout_s: float = CAPTURE_TIMEOUT_S,
) -> WorkerHangError:
    """``error`` with each rank's stacks added; the full dumps written to the run dir."""
    try:
        began = time.monotonic()
        stacks = capture_stacks(list(infos), timeout_s=timeout_s)
        took = time.monotonic() - began
        logger.debug("stacks of %d ranks read in %.1f s", len(stacks), took)
    except Exception as e:  # noqa: BLE001 - an explanation must never replace the error
        return WorkerHangError(f"{error.detail}\nstacks not captured: {type(e).__name__}: {e}")
    if not stacks:
        return WorkerHangError(f"{error.detail}\nstacks not captured: no workers known")
    parts = ("stacks", f"attempt_{attempt}.txt")
    try:
        storage.write_atomic(format_dumps(stacks, infos, silent_ranks).encode(), *parts)
        where = f"full dumps of every rank: {storage.url(*parts)}"
    except Exception as e:  # noqa: BLE001
        where = f"full dumps not written: {type(e).__name__}: {e}"
    return WorkerHangError(hang_message(error.detail, stacks, silent_ranks, where))


def hang_message(detail: str, stacks: dict[int, str], silent: list[int], where: str) -> str:
    """The hang's message followed by an excerpt of each silent rank's stacks (each
    rank's when none is silent) and where the full dumps are."""
    ranks = [r for r in sorted(set(silent)) if r in stacks] or sorted(stacks)
    lines = [detail, f"where the ranks were ({where}):"]
    for rank in ranks:
        body = excerpt(stacks[rank]).splitlines()
        lines.append(f"rank {rank}: {body[0] if body else '(empty)'}")
        lines.extend(f"  {line}" for line in body[1:])
    return "\n".join(lines)
