"""One driver per run directory: a lease file naming its holder, renewed by a heartbeat.

Two drivers launched with one run name would commit into the same
checkpoints directory and prune each other's checkpoints. The first holds
``RUN_DIR/driver.lease`` (its id, host, pid, start and heartbeat); a second
is refused with the holder's identity and the heartbeat's age. A lease is
stale, and taken over with a warning, when its heartbeat is older than
``Settings.lease_stale_s`` or its holder's process is gone: a pid is looked
up only where it names one process, on the holder's own boot and pid
namespace (containers on one host may share a hostname, never their pids), so
a killed driver relaunched at once need not wait.

Acquiring is atomic where the storage allows it: on a file system the first
lease is created with ``O_EXCL``, so of two drivers starting together one
wins. An object store has no compare-and-swap: each driver reads the lease
back after writing it and the one that does not find its own id there stops,
which narrows the race to the store's read-after-write window (S3 and GCS are
strongly consistent).

The lease is checked at every renewal, not only at the start: a driver whose
heartbeat stalled (a storage outage it survives by design) past the stale
time may find that another driver took the run over. Its ``renew`` then
raises ``LeaseLostError`` naming the other driver, and that driver must stop
writing into the run directory at once (``raytf.rundir.state_writer``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid

from raytf.errors import LeaseLostError, RunDirInUseError
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")

LEASE = "driver.lease"


def _namespace() -> str:
    """Where a pid names one process: this boot and this pid namespace ("" if unknown)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}:{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


def _alive_here(doc: dict) -> bool:
    """Is the holder's process still running? Answerable only in its own boot and pid
    namespace; anywhere else it is taken as alive, and its heartbeat decides."""
    same = doc.get("host") == socket.gethostname() and doc.get("ns") == _namespace() != ""
    if not same:
        return True
    try:
        os.kill(int(doc.get("pid", 0)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


class Lease:
    def __init__(self, storage: Storage, stale_s: float, floor: int = 0):
        """``floor``: the highest generation a commit in the run directory carries."""
        self.storage = storage
        self.stale_s = stale_s
        self.floor = floor
        self.doc = {
            "holder": uuid.uuid4().hex,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "ns": _namespace(),
            "started": time.time(),
            "heartbeat": time.time(),
            # The fencing token: one more than the lease it replaced. Commits carry it,
            # and a prune never removes a commit of a later holder's (a driver that lost
            # the lease while stalled, before it noticed, cannot delete its successor's).
            "generation": floor + 1,
        }

    @property
    def stamp(self) -> dict:
        """What this holder's commits carry (``raytf.checkpoint.layout.commit``)."""
        return {"holder": self.doc["holder"], "generation": int(self.doc["generation"])}

    def acquire(self) -> str | None:
        """Hold the lease or raise ``RunDirInUseError``; a line saying whose stale lease
        was taken over, if one was."""
        took_over = None
        held = self._read()
        if held is None and self.storage.local:
            if self._create():
                return None
            held = self._read(settle=True)  # another driver created it first
        if held and held.get("holder") != self.doc["holder"]:
            self.doc["generation"] = max(int(held.get("generation", 0)), self.floor) + 1
            age = time.time() - float(held.get("heartbeat", 0))
            if age < self.stale_s and _alive_here(held):
                raise self._refusal(held, age)
            took_over = (
                f"took over the run directory's lease from the driver pid {held.get('pid')} "
                f"on {held.get('host')} (heartbeat {age:.0f} s ago"
                + ("" if _alive_here(held) else ", its process is gone")
                + ")"
            )
        self._write()
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

    def _read(self, settle: bool = False) -> dict | None:
        """The lease as stored, None if there is none. ``settle``: one just created by
        another driver may not be whole yet: read again until it parses."""
        for _ in range(40 if settle else 1):
            try:
                return self.storage.read_json(LEASE)
            except FileNotFoundError:
                return None
            except ValueError:
                time.sleep(0.05)
        return None

    def _create(self) -> bool:
        """A file system's first lease, created only if there is none (``O_EXCL``)."""
        path = self.storage.path(LEASE)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.doc["heartbeat"] = time.time()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump(self.doc, f)
        return True

    def _write(self) -> None:
        self.doc["heartbeat"] = time.time()
        self.storage.write_json_atomic(self.doc, LEASE)

    def check(self) -> None:
        """Raise ``LeaseLostError``, naming the other driver, unless the lease is still
        this driver's (one that another driver took over while this one's heartbeat
        stalled past the stale time)."""
        held = self.storage.read_json(LEASE) if self.storage.exists(LEASE) else None
        if held is None or held.get("holder") != self.doc["holder"]:
            raise LeaseLostError(self._lost(held))

    def renew(self) -> None:
        """The heartbeat, written only after ``check``."""
        self.check()
        self._write()

    def _lost(self, held: dict | None) -> str:
        if held is None:
            who = "its lease file was removed"
        else:
            who = (
                f"the driver pid {held.get('pid')} on {held.get('host')} took it over "
                f"(started {time.ctime(float(held.get('started', 0)))})"
            )
        return (
            f"this driver no longer holds the lease of run directory {self.storage.url()}: "
            f"{who}, after this driver's heartbeat was older than {self.stale_s:g} s. "
            "This driver stops here and leaves the run directory to the other one: its "
            "checkpoints, state.json and prunes are no longer this driver's to write"
        )

    def release(self) -> None:
        """Remove the lease if it is still this driver's."""
        try:
            if self.storage.read_json(LEASE).get("holder") == self.doc["holder"]:
                self.storage.remove(LEASE)
        except (OSError, ValueError) as exc:
            logger.warning("could not release the run directory's lease: %s", exc)
