"""One driver per run directory: a lease file naming its holder, renewed by a heartbeat.

Two drivers launched with one run name would commit into the same
checkpoints directory and prune each other's checkpoints. The first holds
``RUN_DIR/driver.lease`` (its id, host, pid, start and heartbeat); a second
is refused with the holder's identity and the heartbeat's age. A lease is
stale, and taken over with a warning, when its heartbeat is older than
``Settings.lease_stale_s`` or its holder was on this host and its process is
gone (a killed driver relaunched at once need not wait).

An object store has no compare-and-swap: two drivers starting within the
same second could both write; each reads the lease back after writing and
the one that does not find its own id there stops. That narrows the race to
the store's read-after-write window, which S3 and GCS make strongly
consistent.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid

from raytf.errors import RunDirInUseError
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")

LEASE = "driver.lease"


def _alive_here(doc: dict) -> bool:
    """Is the holder's process still running (only answerable on its own host)?"""
    if doc.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(doc.get("pid", 0)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


class Lease:
    def __init__(self, storage: Storage, stale_s: float):
        self.storage = storage
        self.stale_s = stale_s
        self.doc = {
            "holder": uuid.uuid4().hex,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.time(),
            "heartbeat": time.time(),
        }

    def acquire(self) -> str | None:
        """Hold the lease or raise ``RunDirInUseError``; a line saying whose stale lease
        was taken over, if one was."""
        took_over = None
        try:
            held = self.storage.read_json(LEASE)
        except (FileNotFoundError, ValueError):
            held = None
        if held and held.get("holder") != self.doc["holder"]:
            age = time.time() - float(held.get("heartbeat", 0))
            if age < self.stale_s and _alive_here(held):
                raise self._refusal(held, age)
            took_over = (
                f"took over the run directory's lease from the driver pid {held.get('pid')} "
                f"on {held.get('host')} (heartbeat {age:.0f} s ago"
                + ("" if _alive_here(held) else ", its process is gone")
                + ")"
            )
        self.renew()
        time.sleep(0.05)
        now_held = self.storage.read_json(LEASE)
        if now_held.get("holder") != self.doc["holder"]:
            raise self._refusal(now_held, time.time() - float(now_held.get("heartbeat", 0)))
        if took_over:
            logger.warning(took_over)
        return took_over

    def _refusal(self, held: dict, age: float) -> RunDirInUseError:
        return RunDirInUseError(
            f"run directory {self.storage.url()} is in use by the driver pid {held.get('pid')} "
            f"on {held.get('host')} (started {time.ctime(float(held.get('started', 0)))}, "
            f"heartbeat {age:.0f} s ago): two drivers of one run would prune each other's "
            "checkpoints. Wait for it to end or stop it, or use another RunConfig.name; a "
            f"lease whose heartbeat is older than {self.stale_s:g} s is taken over"
        )

    def renew(self) -> None:
        self.doc["heartbeat"] = time.time()
        self.storage.write_json_atomic(self.doc, LEASE)

    def release(self) -> None:
        """Remove the lease if it is still this driver's."""
        try:
            if self.storage.read_json(LEASE).get("holder") == self.doc["holder"]:
                self.storage.remove(LEASE)
        except (OSError, ValueError) as exc:
            logger.warning("could not release the run directory's lease: %s", exc)
