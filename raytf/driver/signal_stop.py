"""SIGTERM and SIGINT to the driver: checkpoint, write the final state, then exit.

What ``ray job stop``, an evicted head pod and Ctrl-C send. The first signal
asks the group for a checkpoint at its next step boundary and gives it up to
``Settings.stop_checkpoint_wait_s`` to be committed; the run then ends
STOPPED (``state.json`` says so) and the signal's usual ending follows:
``SystemExit(143)`` for SIGTERM, ``KeyboardInterrupt`` for SIGINT. A second
signal ends the driver at once. Handlers exist only while a run's loop runs,
and only on the main thread (Python delivers signals there); a Tune trial's
driver thread leaves them to Tune.
"""

from __future__ import annotations

import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalStop:
    def __init__(self, wait_s: float):
        self.wait_s = wait_s
        self.signum: int | None = None
        self.deadline: float | None = None
        self.committed_before: int = -1
        self._previous: dict[int, object] = {}

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum  # the loop sees it at its next turn
            return
        self.uninstall()
        self._raise(signum)  # a second signal: at once

    def begin(self, committed: int | None, now: float) -> str:
        """The checkpoint was asked for; the line to show."""
        self.committed_before = -1 if committed is None else committed
        self.deadline = now + self.wait_s
        return (
            f"{self.name}: checkpointing before stopping (up to {self.wait_s:g} s; "
            "a second signal stops at once)"
        )

    def saved(self, committed: int | None) -> bool:
        """Was a checkpoint committed since the signal?"""
        return committed is not None and committed > self.committed_before

    def done(self, committed: int | None, now: float) -> bool:
        return self.saved(committed) or (self.deadline is not None and now >= self.deadline)

    def turn(self, committed: int | None, now: float) -> tuple[str | None, bool]:
        """One turn of the loop after the signal (``committed``: the newest committed
        step): the line to show, if any, and whether the run stops now. The first turn
        begins the wait: the caller asks the group for its checkpoint."""
        if self.deadline is None:
            return self.begin(committed, now), False
        if not self.done(committed, now):
            return None, False
        saved = f"checkpoint at step {committed} committed" if self.saved(committed) else None
        return (
            f"stopped on {self.name}: {saved or 'no new checkpoint'}; "
            "launch the same run name again to resume",
            True,
        )

    def reraise(self) -> None:
        """After the run ended STOPPED: the signal's own ending."""
        if self.signum is not None:
            self._raise(self.signum)

    @staticmethod
    def _raise(signum: int) -> None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)
