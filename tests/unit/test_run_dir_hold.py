"""One driver per run directory, its state written off the loop, a fresh start, signals.

Real files in tmp_path, real processes for the lease's holders (a live one and
a dead one), real signals sent to this process.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from raytf import RunConfig
from raytf.driver.run_dir_hold import hold_run_dir
from raytf.driver.signal_stop import SignalStop
from raytf.errors import LeaseLostError, RunDirInUseError
from raytf.rundir.lease import GENERATIONS, LEASE, Lease
from raytf.rundir.run_state import STATE_FILE
from raytf.rundir.set_aside import PREVIOUS_DIR, set_aside
from raytf.rundir.state_writer import StateWriter
from raytf.rundir.storage import Storage
from raytf.settings import Settings


def held_by(storage, pid: int, age_s: float, host=None, ns=None) -> None:
    import socket

    from raytf.rundir.lease import _namespace

    doc = {"holder": "other", "host": host or socket.gethostname(), "pid": pid}
    doc["ns"] = _namespace() if ns is None else ns  # by default: a driver beside this one
    doc.update(started=time.time() - 100, heartbeat=time.time() - age_s)
    storage.write_json_atomic(doc, LEASE)


@pytest.fixture
def live_pid():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_live_drivers_lease_refuses_a_second_driver_naming_it(storage, live_pid):
    storage.makedirs()
    held_by(storage, live_pid, age_s=2)
    with pytest.raises(RunDirInUseError) as info:
        Lease(storage, stale_s=30).acquire()
    text = str(info.value)
    assert f"pid {live_pid}" in text and "heartbeat 2 s ago" in text and "RunConfig.name" in text
    assert storage.read_json(LEASE)["holder"] == "other"  # untouched


def test_a_lease_whose_process_is_gone_is_taken_over_at_once(storage):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    storage.makedirs()
    held_by(storage, dead.pid, age_s=1)
    lease = Lease(storage, stale_s=30)
    said = lease.acquire()
    assert f"pid {dead.pid}" in said and "its process is gone" in said
    assert storage.read_json(LEASE)["holder"] == lease.doc["holder"]
    lease.release()
    assert not storage.exists(LEASE)


def test_a_lease_held_elsewhere_is_taken_over_once_its_heartbeat_is_stale(storage):
    """Stale: unchanged for ``stale_s`` as this host counts (watched that long)."""
    storage.makedirs()
    held_by(storage, 1, age_s=45, host="another-host")
    t0 = time.monotonic()
    said = Lease(storage, stale_s=1).acquire()
    assert "heartbeat 45 s ago, unchanged for 1 s here" in said
    assert time.monotonic() - t0 >= 1.0  # watched, not judged by the two clocks
    held_by(storage, 1, age_s=5, host="another-host")
    with pytest.raises(RunDirInUseError):
        Lease(storage, stale_s=30).acquire()


def test_a_live_lease_on_a_host_whose_clock_is_behind_is_never_taken_over(storage):
    """The holder's clock runs 40 s behind this host's: its heartbeats read 40 s old
    here. Its heartbeat keeps changing while this driver watches: refused. (Compared by
    wall clock, a driver on a host 40 s ahead took a live run's lease over.)"""
    import threading

    storage.makedirs()
    done = threading.Event()

    def holder() -> None:
        while not done.is_set():
            held_by(storage, 1, age_s=40, host="another-host")  # renewed, 40 s "old"
            done.wait(0.2)

    held_by(storage, 1, age_s=40, host="another-host")
    thread = threading.Thread(target=holder, daemon=True)
    thread.start()
    try:
        with pytest.raises(RunDirInUseError, match="its heartbeat changed within 2 s"):
            Lease(storage, stale_s=2).acquire()
    finally:
        done.set()
        thread.join()
    assert storage.read_json(LEASE)["holder"] == "other"


def test_no_two_holders_share_a_generation(storage):
    """Two drivers take over the same stale lease (generation 3) at one moment: exactly
    one holds it, at generation 4, and only one marker of generation 4 exists."""
    import threading

    from raytf.rundir.lease import GENERATIONS

    storage.makedirs()
    held_by(storage, 1, age_s=45, host="another-host")
    storage.write_json_atomic({**storage.read_json(LEASE), "generation": 3}, LEASE)
    leases = [Lease(storage, stale_s=0.3) for _ in range(2)]
    start, outcomes = threading.Barrier(2), {}

    def take(lease: Lease) -> None:
        start.wait()
        try:
            lease.acquire()
            outcomes[lease.doc["holder"]] = lease.doc["generation"]
        except RunDirInUseError:
            outcomes[lease.doc["holder"]] = None

    threads = [threading.Thread(target=take, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = {h: g for h, g in outcomes.items() if g is not None}
    assert len(outcomes) == 2 and list(won.values()) == [4], outcomes
    assert storage.read_json(LEASE)["holder"] == next(iter(won))
    assert storage.listdir(GENERATIONS) == ["000000004"]


def test_release_leaves_a_lease_another_driver_took(storage):
    lease = Lease(storage, stale_s=30)
    storage.makedirs()
    lease.acquire()
    held_by(storage, 1, age_s=0, host="another-host")
    lease.release()
    assert storage.read_json(LEASE)["holder"] == "other"


class FullDisk(Storage):
    """Local storage whose atomic writes fail while ``full`` is set."""

    full = False

    def write_atomic(self, data, *parts):
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().write_atomic(data, *parts)


def test_the_state_writer_rides_out_a_full_disk_and_writes_the_newest_state(tmp_path):
    storage, said = FullDisk(str(tmp_path)), []
    writer = StateWriter(storage, say=said.append)
    storage.full = True
    t0 = time.monotonic()
    writer.put({"state": "RUNNING", "last_step": 1})
    writer.put({"state": "RUNNING", "last_step": 2})  # put never blocks: newest wins
    assert time.monotonic() - t0 < 0.1
    time.sleep(1.2)
    assert writer.outage_s() > 0.9 and "No space left" in said[0] and len(said) == 1
    assert not storage.exists(STATE_FILE)
    storage.full = False
    deadline = time.monotonic() + 10
    while writer.outage_s() > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert storage.read_json(STATE_FILE) == {"state": "RUNNING", "last_step": 2}
    assert "writable again" in said[-1]
    writer.put({"state": "FINISHED", "last_step": 3})
    assert writer.close(timeout_s=5)
    assert storage.read_json(STATE_FILE)["state"] == "FINISHED"


def test_close_says_when_the_last_state_could_not_be_written(tmp_path):
    storage, said = FullDisk(str(tmp_path)), []
    writer = StateWriter(storage, say=said.append)
    storage.full = True
    writer.put({"state": "ERRORED"})
    assert not writer.close(timeout_s=0.5)
    assert "could not be written" in said[-1]


def test_the_writer_renews_the_lease(tmp_path):
    storage = Storage(str(tmp_path))
    lease = Lease(storage, stale_s=30)
    lease.acquire()
    first = storage.read_json(LEASE)["heartbeat"]
    writer = StateWriter(storage, lease, heartbeat_s=0.2)
    time.sleep(0.7)
    assert storage.read_json(LEASE)["heartbeat"] > first
    assert writer.close(timeout_s=5)
    assert not storage.exists(LEASE)  # released with the last state


def test_start_fresh_moves_the_earlier_run_aside_and_keeps_it(tmp_path):
    run = RunConfig(name="changed", storage_path=str(tmp_path), start_fresh=True)
    storage = Storage(run.run_dir)
    storage.write_json_atomic({"step": 40}, "checkpoints", "step_000000040", "manifest.json")
    storage.write_json_atomic({"state": "FINISHED"}, STATE_FILE)
    said = []
    writer = hold_run_dir(run, Settings(), said.append)
    (stamp,) = storage.listdir(PREVIOUS_DIR)
    kept = Storage(storage.path(PREVIOUS_DIR, stamp))
    assert kept.read_json("checkpoints", "step_000000040", "manifest.json") == {"step": 40}
    assert kept.read_json(STATE_FILE) == {"state": "FINISHED"}
    assert sorted(storage.listdir()) == [LEASE, GENERATIONS, PREVIOUS_DIR]
    assert any("moved to" in line for line in said)
    writer.close(5)
    assert set_aside(storage) is None  # nothing left to move: earlier set-asides stay put


def test_a_first_signal_asks_a_second_ends_at_once():
    stop = SignalStop(wait_s=10)
    stop.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signum == signal.SIGTERM and stop.name == "SIGTERM"
        line = stop.begin(committed=40, now=100.0)
        assert "SIGTERM" in line and "second signal" in line
        assert not stop.done(committed=40, now=105.0)
        assert stop.done(committed=44, now=105.0)  # the stop checkpoint committed
        assert stop.done(committed=40, now=110.0)  # or the wait is over
        with pytest.raises(SystemExit) as info:
            os.kill(os.getpid(), signal.SIGTERM)
        assert info.value.code == 143
    finally:
        stop.uninstall()
    assert signal.getsignal(signal.SIGTERM) is not stop._handle
    ctrl_c = SignalStop(wait_s=1)
    ctrl_c.signum = signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
        ctrl_c.reraise()  # after the run ended STOPPED: Ctrl-C's usual ending


def test_the_lease_file_is_json_a_person_can_read(tmp_path):
    storage = Storage(str(tmp_path))
    Lease(storage, stale_s=30).acquire()
    doc = json.loads((tmp_path / LEASE).read_text())
    assert set(doc) == {"holder", "host", "pid", "ns", "started", "heartbeat", "generation"}
    assert doc["pid"] == os.getpid()


def test_a_dead_pid_in_another_pid_namespace_of_this_host_is_judged_by_its_heartbeat(storage):
    """Two containers share a hostname, not their pids: a pid that is gone here may be a
    live driver there, so only the heartbeat's age says it is stale."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    storage.makedirs()
    held_by(storage, dead.pid, age_s=1, ns="another-boot:4026531836")
    with pytest.raises(RunDirInUseError):
        Lease(storage, stale_s=30).acquire()
    held_by(storage, dead.pid, age_s=45, ns="another-boot:4026531836")
    assert "heartbeat 45 s ago" in Lease(storage, stale_s=1).acquire()


def test_a_driver_whose_heartbeat_stalled_finds_its_lease_taken_and_writes_nothing(tmp_path):
    """A's heartbeat stalls past the stale time (a storage stall the driver rides out);
    B takes the run over. A's next renewal names B and writes nothing: the lease stays
    B's, A's writer stops (its last state included) and its commits are refused."""
    import threading

    class Stalling(Storage):
        """A's store: its reads and writes wait while ``stall`` is set (a storage stall)."""

        stall = threading.Event()

        def read_json(self, *parts):
            while self.stall.is_set():
                time.sleep(0.05)
            return super().read_json(*parts)

        def write_atomic(self, data, *parts):
            while self.stall.is_set():
                time.sleep(0.05)
            super().write_atomic(data, *parts)

    storage = Storage(str(tmp_path))
    a = Lease(Stalling(str(tmp_path)), stale_s=0.5)
    a.acquire()
    said = []
    writer = StateWriter(a.storage, a, heartbeat_s=0.2, say=said.append)
    writer.put({"state": "RUNNING", "last_step": 1})
    deadline = time.monotonic() + 5
    while not storage.exists(STATE_FILE) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writer.holds_lease()
    Stalling.stall.set()  # A's heartbeat stops changing
    time.sleep(0.6)  # past the stale time: B watches instead of refusing at once
    b = Lease(storage, stale_s=0.5)
    assert "unchanged for 0.5 s here" in b.acquire()
    Stalling.stall.clear()
    with pytest.raises(LeaseLostError) as info:
        a.renew()
    assert f"pid {b.doc['pid']}" in str(info.value) and "took it over" in str(info.value)
    assert storage.read_json(LEASE)["holder"] == b.doc["holder"]
    deadline = time.monotonic() + 5
    while writer.lost is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writer.lost is not None and not writer.holds_lease()
    assert said[-1] == writer.lost
    writer.put({"state": "ERRORED", "last_step": 2})
    assert not writer.close(timeout_s=1)
    assert storage.read_json(STATE_FILE) == {"state": "RUNNING", "last_step": 1}
    assert storage.read_json(LEASE)["holder"] == b.doc["holder"]  # not released by A


def test_a_driver_taken_over_commits_no_checkpoint(tmp_path):
    from raytf.checkpoint.commits import CheckpointCommits
    from raytf.checkpoint.layout import committed
    from raytf.config import CheckpointConfig

    from .checkpoint_parts import write_parts

    storage = Storage(str(tmp_path))
    a = Lease(storage, stale_s=30)
    a.acquire()
    writer = StateWriter(storage, a, heartbeat_s=60)
    coord = CheckpointCommits(storage, CheckpointConfig(), 2, holds=writer.holds_lease)
    assert coord.on_parts(write_parts(storage, 10), attempt=1)[0].step == 10
    held_by(storage, 1, age_s=0, host="another-host")  # taken over between two heartbeats
    assert coord.on_parts(write_parts(storage, 20), attempt=1) == []
    assert committed(storage) == [10] and "another-host" in writer.lost
    writer.close(timeout_s=1)


RACE = """
import sys
from raytf.errors import RunDirInUseError
from raytf.rundir.lease import Lease
from raytf.rundir.storage import Storage
lease = Lease(Storage(sys.argv[1]), stale_s=30)
print("ready", flush=True)
sys.stdin.readline()  # the start: one line to every process at once
try:
    lease.acquire()
    print("won", lease.doc["holder"], flush=True)
except RunDirInUseError:
    print("refused", flush=True)
sys.stdin.readline()  # a winner stays alive until every process has tried
"""


def test_a_driver_that_read_no_lease_loses_to_one_that_created_it_since(tmp_path):
    """The check-then-write race, interleaved by hand: B reads no lease, A then acquires
    whole, B goes on. The lease is created with ``O_EXCL``: B is refused, A holds it."""
    a = Lease(Storage(str(tmp_path)), stale_s=30)

    class ReadBeforeA(Storage):
        first = True

        def read_json(self, *parts):
            if self.first:  # B's first look: nothing there yet; A acquires right after
                self.first = False
                a.acquire()
                raise FileNotFoundError(parts)
            return super().read_json(*parts)

    b = Lease(ReadBeforeA(str(tmp_path)), stale_s=30)
    with pytest.raises(RunDirInUseError):
        b.acquire()
    assert Storage(str(tmp_path)).read_json(LEASE)["holder"] == a.doc["holder"]
    a.renew()  # still A's


def test_drivers_started_together_on_a_file_system_leave_one_holder(tmp_path):
    """Four driver processes acquire a new run directory's lease at the same instant,
    twice: exactly one wins each time, and the lease names that one."""
    for n in range(2):
        storage = Storage(str(tmp_path / f"run{n}"))
        procs = [
            subprocess.Popen([sys.executable, "-c", RACE, storage.root],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(4)
        ]  # fmt: skip
        try:
            # Every process imported raytf and made its Lease: start them together.
            assert [p.stdout.readline().strip() for p in procs] == ["ready"] * 4
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            outs = [p.stdout.readline().split() for p in procs]
        finally:
            for p in procs:
                p.stdin.close()  # the end: every process exits
                p.wait(timeout=60)
        winners = [out[1] for out in outs if out and out[0] == "won"]
        assert len(winners) == 1, outs
        assert storage.read_json(LEASE)["holder"] == winners[0]


def test_a_taken_over_lease_counts_one_generation_on_and_its_commits_outlive_the_old_prune(
    tmp_path,
):
    """The stalled driver A, before it notices: its prune (keep 1) does not remove B's
    commits, which it never knew; a driver after a clean end counts on past B's."""
    from raytf.checkpoint.layout import CKPT_DIR, MANIFEST, commit, committed, step_dirname
    from raytf.checkpoint.retention import prune
    from tests.unit.checkpoint_parts import write_parts

    storage = Storage(str(tmp_path))
    a = Lease(storage, stale_s=0.2)
    a.acquire()
    time.sleep(0.3)  # A's heartbeat stalls past the stale time
    b = Lease(storage, stale_s=0.2)
    assert "took over" in b.acquire()
    assert (a.stamp["generation"], b.stamp["generation"]) == (1, 2)
    commit(storage, write_parts(storage, 10), world_size=2, attempt=1, holder=a.stamp)
    for step in (20, 30):
        commit(storage, write_parts(storage, step), world_size=2, attempt=2, holder=b.stamp)
    before = {s: storage.read_json(CKPT_DIR, step_dirname(s), MANIFEST) for s in (20, 30)}
    removed = prune(storage, 1, done=[10, 40], generation=1)  # A knows 10 and its own 40
    assert removed == [10]  # its own, older than what it keeps; B's are not its to remove
    assert committed(storage) == [20, 30]
    assert {s: storage.read_json(CKPT_DIR, step_dirname(s), MANIFEST) for s in (20, 30)} == before
    # B's own prune keeps its newest as it always did.
    assert prune(storage, 1, done=[20, 30], generation=2) == [20]
    # B ends and releases the lease; the next driver's generation counts past B's commits,
    # so its prunes remove them as the run's own.
    b.release()
    from raytf.checkpoint.retention import highest_generation

    c = Lease(storage, stale_s=0.2, floor=highest_generation(storage))
    c.acquire()
    assert c.stamp["generation"] == 3
    commit(storage, write_parts(storage, 40), world_size=2, attempt=3, holder=c.stamp)
    assert prune(storage, 1, done=[30, 40], generation=3) == [30]
