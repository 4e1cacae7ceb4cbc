"""Staged checkpoint parts: a local commit moves them into the step's directory, an
object store's names them where they are; the manifest last either way; staging
nobody will commit is removed (no TF needed).

A local run directory and an fsspec memory filesystem (an object store: no rename,
a move would be a copy and a delete). The writers' side (a save staged, never written into
a committed step) is tests/unit/test_worker_checkpointer.py's.
"""

import uuid

import pytest

from raytf import CheckpointConfig
from raytf.checkpoint.commits import CheckpointCommits
from raytf.checkpoint.layout import (
    CKPT_DIR,
    MANIFEST,
    STAGING,
    commit,
    committed,
    latest_intact,
    staged_dir,
    staged_steps,
    step_dirname,
)
from raytf.checkpoint.retention import prune
from raytf.messages import CheckpointPart
from raytf.rundir.storage import Storage

from .checkpoint_parts import write_parts

FILES = {"ckpt.index", "ckpt.data-00000-of-00001", "state_rank0.json", "state_rank1.json"}


class Watched(Storage):
    """Storage that checks the commit's order as it goes: no file moves into a step
    that has a manifest, and the manifest is written only once every file is in place
    (a local step's files gathered, none left in staging; an object store's in their
    writers' folders inside the step)."""

    def __init__(self, root: str):
        super().__init__(root)
        self.moves: list[tuple[tuple, tuple]] = []
        self.manifests = 0

    def move(self, src, dst):
        step_dir = (CKPT_DIR, dst[1])
        assert not self.exists(*step_dir, MANIFEST), f"{dst} moved after the manifest"
        self.moves.append((src, dst))
        super().move(src, dst)

    def create_exclusive(self, data, *parts):  # the manifest: created only if absent
        if parts[-1] == MANIFEST:
            d = parts[-2]
            if self.local:
                assert set(self.listdir(CKPT_DIR, d)) == FILES, self.listdir(CKPT_DIR, d)
                staged = self.listdir(CKPT_DIR, STAGING, d)
                assert all(self.listdir(CKPT_DIR, STAGING, d, name) == [] for name in staged)
            else:
                there = {n for f in self.listdir(CKPT_DIR, d) for n in self.listdir(CKPT_DIR, d, f)}
                assert there == FILES, there
            self.manifests += 1
        return super().create_exclusive(data, *parts)


@pytest.fixture(params=["local", "object-store"])
def watched(request, tmp_path):
    if request.param == "local":
        yield Watched(str(tmp_path / "run"))
        return
    storage = Watched(f"memory://bucket/staging-{uuid.uuid4().hex}")
    yield storage
    storage.remove()


def test_a_commit_moves_the_staged_parts_into_place_with_the_manifest_last(watched):
    parts = write_parts(watched, 10)
    d = step_dirname(10)
    assert committed(watched) == []
    ckpt = commit(watched, parts, world_size=2, attempt=1)
    assert watched.manifests == 1
    assert latest_intact(watched).step == 10 and set(ckpt.manifest["files"]) == FILES
    if watched.local:
        assert set(watched.listdir(CKPT_DIR, d)) == FILES | {MANIFEST}
        assert staged_steps(watched) == []  # the step's staging is removed with it
        # Gathered in the step's staging, then one rename: the directory appears whole.
        src, dst = watched.moves[-1]
        assert src == (CKPT_DIR, STAGING, d, "assembled")
        assert dst == (CKPT_DIR, d)
        assert len(watched.moves) == len(FILES) + 1
        assert "at" not in ckpt.manifest  # flat, as every layout before
    else:
        # No rename on an object store: nothing moves, the manifest names each folder.
        assert watched.moves == [] and watched.listdir(CKPT_DIR) == [d]
        folders = {p.staged for p in parts}
        assert set(watched.listdir(CKPT_DIR, d)) == folders | {MANIFEST}
        assert ckpt.manifest["at"] == {n: p.staged for p in parts for n in p.files}


def test_an_object_stores_commit_leaves_out_and_removes_an_older_writers_folder(tmp_path):
    """A part of an attempt that died before its commit, in the step's own directory:
    never named by the manifest, removed by the commit; a reader copying the step gets
    the named files, flat (``copy_flat``), and ``verify`` finds a file that shrank."""
    from raytf.checkpoint.layout import copy_flat, verify

    storage = Storage(f"memory://bucket/stay-{uuid.uuid4().hex}")
    try:
        older = write_parts(storage, 10)  # attempt 1's, never committed
        parts = write_parts(storage, 10)
        commit(storage, parts, world_size=2, attempt=2)
        d = step_dirname(10)
        assert set(storage.listdir(CKPT_DIR, d)) == {p.staged for p in parts} | {MANIFEST}
        assert not {p.staged for p in older} & set(storage.listdir(CKPT_DIR, d))
        dest = str(tmp_path / "copy")
        copy_flat(storage, CKPT_DIR, d, dest=dest)
        import json
        import os

        assert set(os.listdir(dest)) == FILES | {MANIFEST}
        with open(os.path.join(dest, MANIFEST)) as f:
            assert "at" not in json.load(f)  # the copy is flat, and says so
        with open(os.path.join(dest, "ckpt.data-00000-of-00001"), "rb") as f:
            assert f.read() == b"d" * 100
        manifest = storage.read_json(CKPT_DIR, d, MANIFEST)
        storage.write_json_atomic({**manifest, "at": "x"}, CKPT_DIR, d, MANIFEST)
        assert verify(storage, 10) is None  # a manifest whose folders are not a mapping
        storage.write_json_atomic(manifest, CKPT_DIR, d, MANIFEST)
        assert verify(storage, 10) is not None
        storage.write_atomic(b"d" * 99, CKPT_DIR, d, parts[0].staged, "ckpt.data-00000-of-00001")
        assert verify(storage, 10) is None  # damaged: a file of another size
    finally:
        storage.remove()


def test_a_commit_tried_again_after_its_manifest_failed_finds_its_files_in_place(watched):
    parts = write_parts(watched, 10)
    real = watched.create_json_exclusive
    watched.create_json_exclusive = lambda *a: (_ for _ in ()).throw(OSError("disk full"))
    with pytest.raises(OSError):
        commit(watched, parts, world_size=2, attempt=1)
    assert committed(watched) == []  # files moved, no manifest: not a checkpoint
    watched.create_json_exclusive = real
    commit(watched, parts, world_size=2, attempt=1)
    assert latest_intact(watched).step == 10


def test_a_staged_part_that_is_gone_is_said_and_never_committed(watched):
    said = []
    coord = CheckpointCommits(watched, CheckpointConfig(), world_size=2, say=said.append)
    parts = write_parts(watched, 10)
    watched.remove(CKPT_DIR, *staged_dir(watched, 10, parts[1].staged))
    assert coord.on_parts(parts, attempt=1) == []
    assert len(said) == 1 and said[0].startswith("checkpoint at step 10 not committed: staged")
    assert "state_rank1.json is gone" in said[0] and committed(watched) == []


def test_late_parts_of_a_committed_step_are_left_out_said_and_their_staging_removed(watched):
    said = []
    coord = CheckpointCommits(watched, CheckpointConfig(), world_size=2, say=said.append)
    coord.on_parts(write_parts(watched, 10), attempt=1)
    manifest = watched.read_json(CKPT_DIR, step_dirname(10), MANIFEST)
    assert coord.on_parts(write_parts(watched, 10), attempt=1) == []
    assert said == [
        "checkpoint parts of step 10 not committed: it is committed already and a "
        "committed checkpoint is never written again"
    ]
    assert watched.read_json(CKPT_DIR, step_dirname(10), MANIFEST) == manifest
    assert staged_steps(watched) == []


def test_a_commit_refuses_a_step_with_a_manifest_before_moving_a_file(storage):
    from raytf.checkpoint.layout import StepCommitted

    commit(storage, write_parts(storage, 10), world_size=2, attempt=1)
    late = write_parts(storage, 10)
    with pytest.raises(StepCommitted, match="step 10 not committed: it is committed already"):
        commit(storage, late, world_size=2, attempt=1)
    assert staged_steps(storage) == [10]  # untouched: what prune and new attempts remove
    prune(storage, num_to_keep=None)
    assert staged_steps(storage) == []


def test_prune_removes_staging_no_commit_will_take_and_keeps_what_may_still_commit(storage):
    for step in (10, 20):
        commit(storage, write_parts(storage, step), world_size=2, attempt=1)
    write_parts(storage, 15)  # an attempt's save that never committed, older than 20
    write_parts(storage, 20)  # a late duplicate of the newest commit
    write_parts(storage, 30)  # a save in flight
    assert staged_steps(storage) == [15, 20, 30]
    assert prune(storage, num_to_keep=None) == []  # staging is not a checkpoint dropped
    assert staged_steps(storage) == [30] and committed(storage) == [10, 20]


def test_a_new_attempt_removes_every_staged_part_of_the_attempts_before(storage):
    write_parts(storage, 30)  # a previous driver's: the first attempt touches no file
    coord = CheckpointCommits(storage, CheckpointConfig(), world_size=2)
    coord.new_attempt(2)
    assert staged_steps(storage) == [30]
    coord.on_parts(write_parts(storage, 10), attempt=1)
    half = write_parts(storage, 20)
    coord.on_parts(half[:1], attempt=1)  # rank 1 died before its part of step 20
    assert staged_steps(storage) == [20, 30]
    coord.new_attempt(2)
    assert staged_steps(storage) == [] and committed(storage) == [10]
    assert coord.on_parts(half[1:], attempt=2) == []  # a late half never commits


def test_another_driver_holding_the_lease_keeps_its_staging(storage):
    coord = CheckpointCommits(storage, CheckpointConfig(), world_size=2, holds=lambda: False)
    write_parts(storage, 20)
    coord.new_attempt(2)
    coord.new_attempt(2)
    assert staged_steps(storage) == [20]


def test_a_step_directory_without_a_manifest_is_replaced_by_the_commit(storage):
    """Remains a writer left before staging (or a crash of one): none of its files is
    in the checkpoint the staged parts make."""
    write_parts(storage, 10, world=4, staged=False)  # 4 ranks' state files, an old attempt
    commit(storage, write_parts(storage, 10), world_size=2, attempt=1)
    assert set(storage.listdir(CKPT_DIR, step_dirname(10))) == FILES | {MANIFEST}


def test_a_part_naming_a_staging_outside_its_step_is_refused(storage):
    parts = write_parts(storage, 10)
    for bad in ("../step_000000020", "a/b", "assembled", ".."):
        wrong = [parts[0], CheckpointPart(1, 10, parts[1].files, 0.0, staged=bad)]
        with pytest.raises(ValueError):
            commit(storage, wrong, world_size=2, attempt=1)
    assert committed(storage) == []


def test_a_manifest_written_by_a_try_whose_answer_was_lost_is_the_commits_own(tmp_path):
    """The store created the manifest but its answer never came (a timeout after the
    write): the try again is refused by the store (created only if absent), finds the
    manifest this commit wrote and takes it. Another writer's is ``StepCommitted``."""
    from raytf.checkpoint.layout import StepCommitted

    class LostAnswer(Storage):
        lose = True

        def create_exclusive(self, data, *parts):
            created = super().create_exclusive(data, *parts)
            if self.lose:
                self.lose = False
                raise TimeoutError("read timeout after the PUT")
            return created

    storage = LostAnswer(str(tmp_path / "run"))
    parts = write_parts(storage, 10)
    with pytest.raises(TimeoutError):
        commit(storage, parts, world_size=2, attempt=1)
    ckpt = commit(storage, parts, world_size=2, attempt=1)
    assert ckpt.step == 10 and latest_intact(storage).step == 10
    with pytest.raises(StepCommitted):
        commit(storage, write_parts(storage, 10), world_size=2, attempt=2)
