"""The driver's writes of ``state.json`` and the lease's heartbeat, off its control loop.

A run directory on a full disk or an object store that is away must not stop
the driver: polling, hang detection and preemption go on while these writes
fail. The controller hands over the newest state document (``put``, newest
wins) and returns at once; a thread of its own writes it, retrying with
backoff, and renews the lease every ``heartbeat_s``. ``outage_s`` says how
long writes have been failing: the controller stops the run past its limit
(``Settings.storage_outage_s``), with an error that says so. The first failure
and the recovery are each said once.

A lease another driver took over (``LeaseLostError`` at a renewal) ends the
writing for good: ``lost`` says why, nothing more is written (not even the
last state at ``close``) and the lease is not released, for it is the other
driver's; the controller stops the run when it sees ``lost``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from raytf.errors import LeaseLostError, RaytfError, StorageUnavailableError
from raytf.rundir.lease import Lease
from raytf.rundir.run_state import STATE_FILE
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")

MAX_BACKOFF_S = 2.0  # small writes: retry often, so a recovery is seen within seconds


class StateWriter:
    def __init__(
        self,
        storage: Storage,
        lease: Lease | None = None,
        *,
        heartbeat_s: float = 5.0,
        say: Callable[[str], None] = logger.warning,
    ):
        self.storage = storage
        self.lease = lease
        self.heartbeat_s = heartbeat_s
        self.say = say
        self._doc: dict | None = None
        self._cond = threading.Condition()
        self._closing = False
        self._failing_since: float | None = None
        self.last_error: str | None = None
        self.lost: str | None = None  # another driver holds the lease: why, once renewed
        self._thread = threading.Thread(target=self._loop, daemon=True, name="raytf-state")
        self._thread.start()

    def put(self, doc: dict) -> None:
        """The newest state to write; an older one not yet written is dropped."""
        with self._cond:
            self._doc = doc
            self._cond.notify()

    @property
    def stamp(self) -> dict | None:
        """The lease holder's id and generation, which commits carry (None: no lease)."""
        return None if self.lease is None else self.lease.stamp

    def holds_lease(self) -> bool:
        """Is the lease still this driver's? Asked before a commit writes a manifest, so
        a driver taken over between two heartbeats commits nothing into the other's
        run; a store that cannot answer counts as held (the heartbeat asks again)."""
        if self.lost is not None:
            return False
        if self.lease is None:
            return True
        try:
            self.lease.check()
        except LeaseLostError as exc:
            self.lost = str(exc)
            return False
        except Exception:  # noqa: BLE001 - storage away: the outage is the writer's to say
            return True
        return True

    def halt(self, outage_limit_s: float) -> RaytfError | None:
        """Why the run must stop now, if it must: another driver took the lease over, or
        the run directory has not been writable for ``outage_limit_s``."""
        if self.lost is not None:
            return LeaseLostError(self.lost)
        if self.outage_s() > outage_limit_s:
            return StorageUnavailableError(
                f"the run directory {self.storage.url()} has not been writable for "
                f"{self.outage_s():.0f} s ({self.last_error}); the run stops "
                f"past RAYTF_STORAGE_OUTAGE_S = {outage_limit_s:g} s"
            )
        return None

    def outage_s(self) -> float:
        """Seconds since writes began failing (0 while they succeed)."""
        since = self._failing_since
        return 0.0 if since is None else time.monotonic() - since

    def close(self, timeout_s: float) -> bool:
        """Write the last state (and release the lease); False if it could not be written
        within ``timeout_s``."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout_s)
        if self.lost is not None:
            return False  # the run directory is the other driver's: said when it was lost
        written = not self._thread.is_alive() and self._doc is None
        if not written:
            self.say(
                f"{STATE_FILE} could not be written before the driver ended ({self.last_error}); "
                "it shows an earlier state"
            )
        elif self.lease is not None:
            self.lease.release()
        return written

    def _loop(self) -> None:
        backoff = 0.5
        next_beat = time.monotonic() + self.heartbeat_s
        while True:
            with self._cond:
                # Without a lease, nothing is due until the next state is handed over.
                wait = None if self.lease is None else max(0.0, next_beat - time.monotonic())
                if self._doc is None and not self._closing:
                    self._cond.wait(wait)
                doc, closing = self._doc, self._closing
            beat = self.lease is not None and time.monotonic() >= next_beat
            if doc is None and not beat:
                if closing:
                    return
                continue
            try:
                if beat:  # first: a lease another driver holds stops the state's write too
                    self.lease.renew()
                    next_beat = time.monotonic() + self.heartbeat_s
                if doc is not None:
                    self.storage.write_json_atomic(doc, STATE_FILE)
                    with self._cond:
                        if self._doc is doc:
                            self._doc = None
            except LeaseLostError as exc:
                self.lost = str(exc)
                self.say(self.lost)
                return
            except Exception as exc:  # noqa: BLE001 - any storage error: the loop goes on
                self._failed(exc)
                time.sleep(backoff)  # close() bounds how long the last write may take
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            backoff = 0.5
            if self._failing_since is not None:
                took = time.monotonic() - self._failing_since
                self._failing_since = None
                self.say(f"the run directory is writable again after {took:.0f} s")

    def _failed(self, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            self.say(
                f"cannot write the run directory ({self.last_error}); training goes on, "
                "and the driver keeps trying"
            )
