"""One driver per run directory: a lease file naming its holder, renewed by a heartbeat.

Two drivers launched with one run name would commit into the same
checkpoints directory and prune each other's checkpoints. The first holds
``RUN_DIR/driver.lease`` (its id, host, pid, start and heartbeat); a second
is refused with the holder's identity and the heartbeat's age. A lease is
stale, and taken over with a warning, when its heartbeat has not changed for
``Settings.lease_stale_s`` of the reader's own clock (two hosts' wall clocks are
never compared: one running ahead would read a live lease as old), or at once
when its holder's process is gone: a pid is looked up only where it names one
process, on the holder's own boot and pid namespace (containers on one host may
share a hostname, never their pids), so a killed driver relaunched at once need
not wait. A heartbeat that looks fresh by the reader's clock is refused at once.

Acquiring is exclusive where the store allows it (``Storage.create_exclusive``:
a hard link on a file system, a conditional PUT on S3): the first lease is
created only if absent, and each holder takes the next generation by creating
its marker in ``driver.lease.generations/`` only if absent, so of two drivers
taking the lease at one moment one gets it, and no two holders share a
generation (commits carry it). Each driver also reads the lease back after
writing it.

The lease is checked at every renewal, not only at the start: a driver whose
heartbeat stalled (a storage outage it survives by design) past the stale
time may find that another driver took the run over. Its ``renew`` then
raises ``LeaseLostError`` naming the other driver, and that driver must stop
writing into the run directory at once (``raytf.rundir.state_writer``).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid

from raytf.errors import LeaseLostError, RunDirInUseError
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")

LEASE = "driver.lease"
# One marker per generation of the lease, created exclusively (``_take_generation``).
GENERATIONS = "driver.lease.generations"


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
        if held and held.get("holder") != self.doc["holder"]:
            age = time.time() - float(held.get("heartbeat", 0))
            alive = _alive_here(held)
            if alive and age < self.stale_s:
                raise self._refusal(held, age)
            if alive:  # stale by this host's clock, which may run ahead of the holder's
                changed = self._watch(held)
                if changed is not None:
                    raise self._refusal(changed, None)
            took_over = (
                f"took over the run directory's lease from the driver pid {held.get('pid')} "
                f"on {held.get('host')} (heartbeat {age:.0f} s ago"
                + (f", unchanged for {self.stale_s:g} s here" if alive else "")
                + ("" if alive else ", its process is gone")
                + ")"
            )
        self.doc["generation"] = self._take_generation(held)
        if held is None:  # the first lease: created only if absent (another may be now)
            self.doc["heartbeat"] = time.time()
            if not self.storage.create_json_exclusive(self.doc, LEASE):
                now_held = self._read() or {}
                raise self._refusal(now_held, time.time() - float(now_held.get("heartbeat", 0)))
        else:
            self._write()
        time.sleep(0.05)
        now_held = self.storage.read_json(LEASE)
        if now_held.get("holder") != self.doc["holder"]:
            raise self._refusal(now_held, time.time() - float(now_held.get("heartbeat", 0)))
        if took_over:
            logger.warning(took_over)
        return took_over

    def _watch(self, held: dict) -> dict | None:
        """Watch the lease for ``stale_s`` of this host's own clock: the lease as its
        holder renewed it (alive: its heartbeat changed), or None (stale). Two hosts'
        wall clocks are never compared: a driver on a host 40 s ahead read a live
        lease as 40 s old and took it over."""
        deadline = time.monotonic() + self.stale_s
        while time.monotonic() < deadline:
            time.sleep(min(1.0, self.stale_s / 10))
            now = self._read()
            if now is None:
                return None  # released meanwhile: free
            if now.get("holder") != held.get("holder") or now.get("heartbeat") != held.get(
                "heartbeat"
            ):
                return now
        return None

    def _take_generation(self, held: dict | None) -> int:
        """The next generation of the lease, taken by creating its marker only if absent:
        one more than the lease read (past every marker when there is none: a lease
        released at a clean end is gone). Of two drivers taking the same lease at one
        moment one creates the marker first and the other is refused, so no two holders
        share a generation. A marker whose taker never wrote its lease (it died between
        the two writes: the lease still names the holder read) is stepped over."""
        if held is None:
            taken = [int(n) for n in self.storage.listdir(GENERATIONS) if n.isdigit()]
            generation = max([self.floor, *taken]) + 1
        else:
            generation = max(int(held.get("generation", 0)), self.floor) + 1
        claim = {k: self.doc[k] for k in ("holder", "host", "pid", "started")}
        while not self.storage.create_json_exclusive(claim, GENERATIONS, f"{generation:09d}"):
            time.sleep(1.0)  # the other taker writes its lease right after its marker
            now = self._read()
            if held is None or now is None or now.get("holder") != held.get("holder"):
                raise RunDirInUseError(
                    f"run directory {self.storage.url()}: another driver took its lease "
                    f"(generation {generation}) at the same moment as this one; two drivers "
                    "of one run would prune each other's checkpoints. Use another "
                    "RunConfig.name, or launch again once it has ended"
                )
            generation += 1
        return generation

    def _refusal(self, held: dict, age: float | None) -> RunDirInUseError:
        when = (
            f"heartbeat {age:.0f} s ago"
            if age is not None
            else f"its heartbeat changed within {self.stale_s:g} s of this host's clock"
        )
        return RunDirInUseError(
            f"run directory {self.storage.url()} is in use by the driver pid {held.get('pid')} "
            f"on {held.get('host')} (started {time.ctime(float(held.get('started', 0)))}, "
            f"{when}): two drivers of one run would prune each other's "
            "checkpoints. Wait for it to end or stop it, or use another RunConfig.name; a "
            f"lease whose heartbeat does not change for {self.stale_s:g} s is taken over"
        )

    def _read(self) -> dict | None:
        """The lease as stored, None if there is none; one being replaced may not parse
        for a moment: read again."""
        for _ in range(40):
            try:
                return self.storage.read_json(LEASE)
            except FileNotFoundError:
                return None
            except ValueError:
                time.sleep(0.05)
        return None

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
