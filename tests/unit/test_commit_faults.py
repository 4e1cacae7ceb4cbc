"""The driver's checkpoint bookkeeping when storage fails or a checkpoint is not good.

Real files in tmp_path; a storage whose writes fail is a real ``Storage`` whose
``write_atomic`` raises ``OSError`` (ENOSPC) a given number of times, as a full
disk does. The integration tests put a real full tmpfs and a failing S3 endpoint
under whole runs.
"""

import errno
import json
import math
import os

from raytf import CheckpointConfig
from raytf.checkpoint.commits import CheckpointCommits
from raytf.checkpoint.layout import (
    CKPT_DIR,
    MANIFEST,
    commit,
    committed,
    latest_intact,
    safe_name,
    step_dirname,
)
from raytf.checkpoint.retention import mark_bad, prune, ranked
from raytf.rundir.storage import Storage
from tests.unit.checkpoint_parts import write_parts


class FillingDisk(Storage):
    """Local storage whose next ``fail`` atomic writes find the disk full."""

    fail = 0

    def write_atomic(self, data, *parts):
        if self.fail:
            self.fail -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        super().write_atomic(data, *parts)

    def create_exclusive(self, data, *parts):  # a manifest's write
        if self.fail:
            self.fail -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().create_exclusive(data, *parts)


def commits(storage, said, **config):
    return CheckpointCommits(storage, CheckpointConfig(**config), 2, say=said.append)


def test_a_manifest_the_disk_refused_is_committed_at_a_later_poll(tmp_path, monkeypatch):
    storage, said = FillingDisk(str(tmp_path / "run")), []
    coord = commits(storage, said)
    storage.fail = 2
    clock = [100.0]
    monkeypatch.setattr("raytf.checkpoint.commits.time.monotonic", lambda: clock[0])
    assert coord.on_parts(write_parts(storage, 10), attempt=1) == []
    assert committed(storage) == [] and said == []
    assert coord.on_parts([], attempt=1) == []  # not due yet: 1 s of backoff
    clock[0] += 1.0
    assert coord.on_parts([], attempt=1) == []  # the second failure: 2 s more
    clock[0] += 2.0
    (ckpt,) = coord.on_parts([], attempt=1)
    assert ckpt.step == 10 and latest_intact(storage).step == 10 and said == []


def test_a_manifest_never_written_is_given_up_and_said_and_training_goes_on(tmp_path, monkeypatch):
    storage, said = FillingDisk(str(tmp_path / "run")), []
    coord = commits(storage, said)
    storage.fail = 100
    clock = [0.0]
    monkeypatch.setattr("raytf.checkpoint.commits.time.monotonic", lambda: clock[0])
    coord.on_parts(write_parts(storage, 10), attempt=1)
    for _ in range(40):
        clock[0] += 1.0
        coord.on_parts([], attempt=1)
    assert len(said) == 1 and "step 10 not committed" in said[0] and "5 tries" in said[0]
    storage.fail = 0  # the disk has room again: the next save commits
    (ckpt,) = coord.on_parts(write_parts(storage, 20), attempt=1)
    assert ckpt.step == 20 and committed(storage) == [20]


def test_a_newer_commit_drops_an_older_unwritten_one(tmp_path, monkeypatch):
    storage, said = FillingDisk(str(tmp_path / "run")), []
    coord = commits(storage, said)
    storage.fail = 1
    clock = [0.0]
    monkeypatch.setattr("raytf.checkpoint.commits.time.monotonic", lambda: clock[0])
    coord.on_parts(write_parts(storage, 10), attempt=1)
    (ckpt,) = coord.on_parts(write_parts(storage, 20), attempt=1)
    clock[0] += 30
    assert ckpt.step == 20 and coord.on_parts([], attempt=1) == []
    assert committed(storage) == [20]  # 10 is never committed after 20


def test_nan_weights_are_not_committed_unless_allowed(storage):
    said = []
    coord = commits(storage, said)
    parts = write_parts(storage, 10)
    parts[0] = parts[0].__class__(**{**parts[0].__dict__, "finite": False})
    assert coord.on_parts(parts, attempt=1) == []
    assert committed(storage) == [] and "NaN or Inf" in said[0]
    allowing = commits(storage, said, refuse_nonfinite=False)
    (ckpt,) = allowing.on_parts(parts, attempt=1)
    assert ckpt.step == 10


def test_a_timed_save_that_never_commits_is_asked_again_an_interval_later(storage):
    coord = CheckpointCommits(storage, CheckpointConfig(checkpoint_every_s=5), world_size=2)
    start = coord._last_save
    assert coord.time_due(start + 6)
    assert not coord.time_due(start + 10)  # asked 4 s ago: the save may be on its way
    assert coord.time_due(start + 11.5)  # 5.5 s unanswered: lost (a failed save), ask again


def test_retention_keeps_the_newest_intact_never_counting_bad_ones(storage):
    for step in (10, 20, 30, 40):
        commit(storage, write_parts(storage, step), world_size=2, attempt=1)
    mark_bad(storage, 40, "a damaged index")
    mark_bad(storage, 30, "a damaged index")
    for step in (50, 60):  # a fallback to 20, then two fresh commits
        commit(storage, write_parts(storage, step), world_size=2, attempt=2)
    removed = prune(storage, 2, bad={30, 40})
    assert committed(storage) == [50, 60] and removed == [10, 20, 30, 40]
    # A bad newest checkpoint takes no place: counted, it would have kept 70 and 80 (bad)
    # and dropped 60, leaving one checkpoint a restart could use.
    for step in (70, 80):
        commit(storage, write_parts(storage, step), world_size=2, attempt=3)
    mark_bad(storage, 80, "damaged")
    assert prune(storage, 2, bad={80}) == [50]
    assert committed(storage) == [60, 70, 80]  # the newest two intact, and the bad newest


def test_a_driver_reads_the_bad_marks_of_the_drivers_before_it(storage):
    for step in (10, 20):
        commit(storage, write_parts(storage, step), world_size=2, attempt=1)
    mark_bad(storage, 20, "damaged")
    coord = CheckpointCommits(storage, CheckpointConfig(num_to_keep=1), world_size=2)
    assert coord.bad == {20} and coord.restore_point().step == 10
    (ckpt,) = coord.on_parts(write_parts(storage, 30), attempt=2)
    assert committed(storage) == [30]  # 10 pruned (one to keep), 20 (bad, older) too


def test_nan_scores_rank_last():
    scores = {10: 0.5, 20: math.nan, 30: 0.9, 40: None, 50: math.inf}
    assert ranked([10, 20, 30, 40, 50], scores, "max") == [30, 10, 50, 40, 20]
    assert ranked([10, 20, 30, 40, 50], scores, "min") == [10, 30, 50, 40, 20]


def test_manifest_names_that_leave_the_step_directory_make_it_damaged(storage):
    assert safe_name("ckpt.index") and safe_name("state_rank1.json")
    for bad in ("../state.json", "/etc/passwd", "a/b", "..", "", "~root", "a\\b", 3):
        assert not safe_name(bad), bad
    commit(storage, write_parts(storage, 10), world_size=2, attempt=1)
    path = storage.path(CKPT_DIR, step_dirname(10), MANIFEST)
    with open(path) as f:
        manifest = json.load(f)
    manifest["files"]["../../state.json"] = 10
    with open(path, "w") as f:
        json.dump(manifest, f)
    assert latest_intact(storage) is None
    assert os.path.exists(path)  # refused, never acted on


def test_a_step_marked_bad_is_never_committed_again_and_the_next_one_is(storage):
    """After a fallback the redone step's label is committed already (its manifest marks
    it bad): its parts are left out, said, and the bad directory stays as it was (the
    writers refuse that step too); the next step commits and is the newest again."""
    for step in (10, 20):
        commit(storage, write_parts(storage, step), world_size=2, attempt=1)
    said = []
    coord = CheckpointCommits(storage, CheckpointConfig(num_to_keep=2), 2, say=said.append)
    coord.mark_bad(20, "a damaged index")
    assert coord.restore_point().step == 10
    bad_dir = storage.path(CKPT_DIR, step_dirname(20))
    before = {n: open(os.path.join(bad_dir, n), "rb").read() for n in os.listdir(bad_dir)}
    assert coord.on_parts(write_parts(storage, 20), attempt=2) == []  # redone from 10
    assert said == [
        "checkpoint parts of step 20 not committed: it is committed already and a "
        "committed checkpoint is never written again"
    ]
    after = {n: open(os.path.join(bad_dir, n), "rb").read() for n in os.listdir(bad_dir)}
    assert after == before and storage.listdir(CKPT_DIR, ".staging") == []
    (ckpt,) = coord.on_parts(write_parts(storage, 30), attempt=2)
    assert ckpt.step == 30 and coord.restore_point().step == 30


def _truncate(storage, step: int, name: str = "ckpt.data-00000-of-00001") -> None:
    with open(storage.path(CKPT_DIR, step_dirname(step), name), "r+b") as f:
        f.truncate(10)


def test_a_damaged_newest_commit_never_makes_retention_drop_the_fresh_one(storage):
    """num_to_keep=1, step 300 committed then truncated (not yet marked bad by any
    restore): the driver falls back to 0 and commits 100. 300 counted as one of the
    newest would drop 100 the moment it landed, and Result.checkpoint would name it."""
    commit(storage, write_parts(storage, 300), world_size=2, attempt=1)
    _truncate(storage, 300)
    coord = commits(storage, [], num_to_keep=1)
    assert coord.restore_point() is None and coord.bad == {300}
    (ckpt,) = coord.on_parts(write_parts(storage, 100), attempt=2)
    assert ckpt.step == 100 and coord.latest.step == 100
    assert committed(storage) == [100, 300] and sorted(coord.kept) == [100, 300]
    assert latest_intact(storage, skip=coord.bad).step == 100


def test_the_step_just_committed_is_never_dropped_whatever_the_list_says():
    from raytf.checkpoint.retention import to_drop

    assert to_drop([100, 300], 1, None, "max") == [100]  # what a plain count drops
    assert to_drop([100, 300], 1, None, "max", last=100) == []
    assert to_drop([100, 200, 300], 1, {100: 0.9, 200: 0.1, 300: 0.2}, "max", last=100) == [200]


def test_prune_leaves_a_committed_folder_the_drivers_list_missed(storage):
    """A store whose listing lagged when the driver read it: step 20 was committed (by
    the driver before it) but is not in ``done``. It has a manifest: not the remains of
    an interrupted save, never removed."""
    for step in (10, 20, 30):
        commit(storage, write_parts(storage, step), world_size=2, attempt=1)
    os.makedirs(storage.path(CKPT_DIR, step_dirname(25)))  # an interrupted save's remains
    removed = prune(storage, 5, done=[10, 30])
    assert removed == [25] and committed(storage) == [10, 20, 30]


class FailingStore(Storage):
    """Local storage whose manifest writes fail as a store that errors."""

    def create_exclusive(self, data, *parts):
        raise ConnectionError("the endpoint closed the connection")


def test_a_storage_error_in_the_emergency_commit_costs_the_checkpoint_not_the_run(tmp_path):
    import dataclasses

    storage = FailingStore(str(tmp_path / "run"))
    coord = CheckpointCommits(storage, CheckpointConfig(), world_size=3)
    survivors = {
        p.rank: dataclasses.replace(p, reason="emergency", digest="a")
        for p in write_parts(storage, 27, world=2)
    }
    ckpt, why = coord.commit_emergency(survivors, {2}, attempt=1)
    assert ckpt is None and "step 27 could not be committed (ConnectionError" in why
    assert committed(storage) == [] and coord.latest is None
