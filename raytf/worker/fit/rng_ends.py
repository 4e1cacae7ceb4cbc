"""Python's and NumPy's global RNGs between a program's ``fit`` calls, carried across a
restart so that the calls a resumed worker replays hand the program back the state the
uninterrupted run had.

A restart runs the program again from its top. Each ``fit`` call that had finished
before the checkpoint returns at once, and the program then does what it did after that
call: a program that reshuffles its arrays in place with ``np.random`` before each call
draws again. Without the state at that call's end, the draw uses whatever state the
restore left (the checkpoint's moment, later in the run), and every call after it trains
on other orders, silently.

What is carried is small and bounded: only the ends of calls after which the program
drew before its next call (seen at that next call's start: the state moved), at most
``KEPT`` of them (about 14 KB each as JSON), the newest. A replayed call whose end was
dropped by that bound says so once. The resumed call itself gets the checkpoint's own
moment back (``resumed``): the replay has moved the RNGs since the restore.
"""

from __future__ import annotations

import random

import numpy as np

from raytf.checkpoint.restore import rng_raw, rng_state, set_rng_state

KEPT = 32


def same(a: tuple, b: tuple) -> bool:
    """Are two ``rng_raw`` captures the same state? (Microseconds: 2 x 624 words.)"""
    (py_a, np_a), (py_b, np_b) = a, b
    if py_a != py_b:
        return False
    return (
        np_a[0] == np_b[0]
        and np.array_equal(np_a[1], np_b[1])
        and tuple(np_a[2:]) == tuple(np_b[2:])
    )


class RngEnds:
    """The ends one worker carries, keyed by the tracked ``fit`` call's index."""

    def __init__(self) -> None:
        self.ends: dict[int, dict] = {}
        self.dropped = -1  # the newest call whose end the bound dropped
        self.last_end: tuple | None = None  # rng_raw() as the last finished call ended
        self.moment: tuple | None = None  # rng_raw() as the restore left it
        self._said = False

    # -- the checkpoint's state ----------------------------------------------------
    def doc(self) -> dict:
        out: dict = {"rng_ends": {str(k): v for k, v in self.ends.items()}}
        if self.dropped >= 0:
            out["rng_ends_dropped"] = self.dropped
        return out

    def restore(self, saved: dict | None) -> None:
        saved = saved or {}
        self.ends = {int(k): v for k, v in (saved.get("rng_ends") or {}).items()}
        self.dropped = int(saved.get("rng_ends_dropped", -1))
        legacy = saved.get("rng_before")  # format 2: the end of the call before the place
        call = int(saved.get("call", 0))
        if legacy and call - 1 not in self.ends and call >= 1:
            self.ends[call - 1] = legacy

    # -- the program's calls -------------------------------------------------------
    def call_starts(self, index: int) -> None:
        """At a tracked call's start: did the program draw since the call before ended?"""
        if self.last_end is None or index < 1 or same(rng_raw(), self.last_end):
            return
        self.ends[index - 1] = rng_state(self.last_end)
        while len(self.ends) > KEPT:
            oldest = min(self.ends)
            del self.ends[oldest]
            self.dropped = max(self.dropped, oldest)

    def call_ended(self) -> None:
        self.last_end = rng_raw()

    def replayed(self, index: int, rank: int) -> None:
        """A call that had finished before the checkpoint returned at once: put back its
        end, where the program drew after it."""
        end = self.ends.get(index)
        if end is not None:
            set_rng_state(end)
        elif index <= self.dropped and not self._said:
            self._said = True
            print(
                f"[raytf] rank {rank}: fit calls 1-{self.dropped + 1}: the Python and NumPy "
                f"random states between them are not in the checkpoint (only the newest "
                f"{KEPT} are kept): what the program draws between those calls is drawn "
                "anew (not exact if it draws there)",
                flush=True,
            )
        self.call_ended()

    def resumed(self, index: int) -> None:
        """The call holding the checkpoint's place resumes: the RNGs as they were then."""
        if index > 0 and self.moment is not None:
            random.setstate(self.moment[0])
            np.random.set_state(self.moment[1])

    def restored(self) -> None:
        """Right after the restore: what it set is the checkpoint's moment."""
        self.moment = rng_raw()
