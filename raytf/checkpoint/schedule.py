"""When a worker saves: the step every rank agrees on, without a collective per step.

Every rank must save at the same step (saving may run collectives). Two ways
to agree:

- ``checkpoint_every_steps``: each rank decides from its own step count
  (``SaveSchedule.due``, pure). An interval crossed at a step the loop cannot
  resume from (inside a Keras ``fit`` epoch) is owed to the next resumable
  step: a checkpoint from mid-epoch would make the resumed ``fit`` replay the
  epoch from its start and run past its last step.
- On demand (the driver's timer, a termination notice): the chief, at its next
  step boundary ``s``, publishes "save at s+1" in TF's coordination-service
  key-value store and waits until every rank's watcher thread has
  acknowledged. No rank can finish step s+1 without the chief, so every rank
  knows the target before it gets there.

A SIGTERM to any worker is caught by TF's preemption notifier, which publishes
``TF_DEFAULT_PREEMPTION_NOTICE_KEY`` to every rank; the watcher here turns it
into an on-demand save (and the poll tells the driver).
"""

from __future__ import annotations

import threading

PREEMPTION_NOTICE_KEY = "TF_DEFAULT_PREEMPTION_NOTICE_KEY"
_REQUEST_KEY = "raytf_ckpt_request_{}"
_ACK_KEY = "raytf_ckpt_ack_{}_{}"


def crossed(previous: int | None, step: int, every: int) -> bool:
    """Did the steps after ``previous`` up to ``step`` pass a multiple of ``every``?"""
    if previous is None or previous >= step:
        return step % every == 0
    return step // every > previous // every


def _kv():
    from tensorflow.python.eager import context

    return context.context()


class SaveSchedule:
    """One rank's save decisions; ``due`` is called at every step boundary."""

    def __init__(self, rank: int, world_size: int, every_steps: int | None):
        self.rank = rank
        self.world_size = world_size
        self.every_steps = every_steps
        self.last: int | None = None  # the previous step boundary, for interval crossings
        self.notice: str | None = None  # a termination notice seen anywhere in the group
        self._owed = False  # an interval crossed where the loop cannot resume
        self._lock = threading.Lock()
        self._pending: str | None = None  # chief: a save was asked for
        self._target: tuple[int, str] | None = None  # agreed (step, reason)
        self._round = 0

    def due(self, step: int, resumable: bool) -> tuple[str | None, str | None]:
        """(the reason to save at ``step``, or None; a request the chief must publish)."""
        reason = None
        with self._lock:
            if resumable and self._target is not None and self._target[0] <= step:
                # The first boundary at or after the target: every rank calls step_end at
                # the same steps (one per step, or one per multi-step call), so they agree.
                reason = self._target[1]
                self._target = None
            pending = self._pending if self.rank == 0 else None
        previous, self.last = self.last, step
        repeat = previous == step  # the same step again, now resumable: saved already
        every = self.every_steps
        passed = bool(every) and not repeat and crossed(previous, step, every)
        if passed and not resumable:
            self._owed = True
        elif reason is None and (passed or (resumable and self._owed)):
            reason = "interval"
        if reason:
            self._owed = False
        return reason, (pending if reason is None else None)

    def saved_at(self, step: int) -> None:
        """A save the loop took itself (a session's): intervals count from it."""
        self.last, self._owed = step, False

    # -- on demand ------------------------------------------------------------------
    def request(self, reason: str) -> None:
        """Chief only: save at the next step boundary (called from the actor's poll thread)."""
        with self._lock:
            if self._pending is None or reason == "termination":
                self._pending = reason  # a termination notice outranks a timer

    def agree_on_next_step(self, step: int, reason: str) -> None:
        self._round += 1
        target = step + 1
        kv = _kv()
        kv.set_config_key_value(_REQUEST_KEY.format(self._round), f"{target}:{reason}")
        for rank in range(1, self.world_size):
            kv.get_config_key_value(_ACK_KEY.format(self._round, rank))
        with self._lock:
            self._target = (target, reason)
            self._pending = None

    def start_watchers(self) -> None:
        threading.Thread(target=self._watch_notice, daemon=True, name="raytf-notice").start()
        if self.rank != 0:
            threading.Thread(target=self._watch_requests, daemon=True, name="raytf-ckpt").start()

    def _watch_requests(self) -> None:
        kv = _kv()
        k = 0
        while True:
            k += 1
            try:
                value = kv.get_config_key_value(_REQUEST_KEY.format(k))
            except Exception:  # noqa: BLE001 - the group is going away
                return
            target, reason = value.split(":", 1)
            with self._lock:
                self._target = (int(target), reason)
            kv.set_config_key_value(_ACK_KEY.format(k, self.rank), "1")

    def _watch_notice(self) -> None:
        try:
            who = _kv().get_config_key_value(PREEMPTION_NOTICE_KEY)
        except Exception:  # noqa: BLE001
            return
        self.notice = str(who)
        if self.rank == 0:
            self.request("termination")
