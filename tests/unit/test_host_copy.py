"""A node's host copy is used only when the committed manifest names it, whole."""

import os

from raytf.checkpoint import host_copy
from raytf.checkpoint.host_copy import HostCopy
from raytf.checkpoint.layout import step_dirname
from raytf.settings import Settings


def _write(copy: HostCopy, step: int, data: bytes = b"weights") -> tuple[str, dict]:
    staging = copy.staging()
    with open(os.path.join(staging, "ckpt.index"), "wb") as f:
        f.write(b"index")
    with open(os.path.join(staging, "ckpt.data-00000-of-00001"), "wb") as f:
        f.write(data)
    copy_id = copy.keep(staging, step_dirname(step))
    files = {"ckpt.index": 5, "ckpt.data-00000-of-00001": len(data), "state_rank0.json": 2}
    return copy_id, {"files": files, "host_copies": [copy_id]}


def test_found_only_when_the_manifest_names_this_copy(tmp_path):
    copy = HostCopy("s3://bucket/runs/a", str(tmp_path))
    copy_id, manifest = _write(copy, 20)
    assert copy.find(step_dirname(20), manifest) == os.path.join(copy.dir, step_dirname(20))
    # The same step from an attempt that never committed it: another copy id.
    assert copy.find(step_dirname(20), {**manifest, "host_copies": ["other"]}) is None
    assert copy.find(step_dirname(40), manifest) is None
    # Another run's copies live apart.
    assert HostCopy("s3://bucket/runs/b", str(tmp_path)).find(step_dirname(20), manifest) is None


def test_a_damaged_copy_is_not_used(tmp_path):
    copy = HostCopy("s3://bucket/runs/a", str(tmp_path))
    _, manifest = _write(copy, 20)
    path = os.path.join(copy.dir, step_dirname(20), "ckpt.data-00000-of-00001")
    with open(path, "wb") as f:
        f.write(b"trunc")
    assert copy.find(step_dirname(20), manifest) is None


def test_a_newer_write_of_a_step_replaces_it_and_old_steps_are_dropped(tmp_path):
    copy = HostCopy("s3://bucket/runs/a", str(tmp_path))
    first, _ = _write(copy, 20, b"attempt one")
    second, manifest = _write(copy, 20, b"attempt two")
    assert first != second and copy.find(step_dirname(20), manifest)
    for step in (40, 60):
        _write(copy, step)
    kept = sorted(n for n in os.listdir(copy.dir) if not n.startswith("."))
    assert kept == [step_dirname(40), step_dirname(60)][-host_copy.KEEP :]
    copy.drop()
    assert not os.path.exists(copy.dir)


def test_no_root_means_no_copies(tmp_path):
    copy = HostCopy("s3://bucket/runs/a", None)
    assert not copy.enabled and copy.find(step_dirname(20), {"files": {}}) is None
    copy.drop()


def test_a_full_tmpfs_costs_the_copy_not_the_checkpoint(tmp_path):
    copy = HostCopy("s3://bucket/runs/a", str(tmp_path))
    tries = []

    def fill(directory, tf):
        tries.append((directory.startswith(copy.dir), tf))
        if directory.startswith(copy.dir):
            raise OSError(28, "No space left on device")
        open(os.path.join(directory, "state_rank0.json"), "w").close()

    staging, in_copy = copy.fill(fill, tf=True, must_write_tf=True)
    assert not in_copy and os.listdir(staging) == ["state_rank0.json"]
    assert tries == [(True, True), (False, True)]
    assert not [n for n in os.listdir(copy.dir) if n.startswith(".staging")]
    tries.clear()
    copy.fill(fill, tf=True, must_write_tf=False)  # a node leader: its TF files were the copy
    assert tries == [(True, True), (False, False)]


def test_drop_leaves_what_another_rank_kept(tmp_path):
    mine, theirs = (HostCopy("s3://bucket/runs/a", str(tmp_path)) for _ in range(2))
    _write(mine, 20)
    _, manifest = _write(theirs, 40)
    mine.drop()
    assert theirs.find(step_dirname(40), manifest) and not os.path.exists(
        os.path.join(mine.dir, step_dirname(20))
    )
    theirs.drop()
    assert not os.path.exists(mine.dir)


def test_drop_also_removes_older_steps_that_earlier_attempts_kept(tmp_path):
    earlier = HostCopy("s3://bucket/runs/a", str(tmp_path))  # a survivor, since torn down
    _write(earlier, 970)  # its emergency checkpoint, restored from by the next attempt
    last = HostCopy("s3://bucket/runs/a", str(tmp_path))
    _write(last, 980)
    last.drop()
    assert not os.path.exists(last.dir)


def test_a_new_run_sweeps_other_runs_stale_copies_and_keeps_live_ones(tmp_path):
    stale = HostCopy("s3://bucket/runs/killed", str(tmp_path))
    live = HostCopy("s3://bucket/runs/live", str(tmp_path))
    _write(stale, 20)
    _write(live, 20)
    day_ago = os.path.getmtime(live.dir) - 2 * 86400
    os.utime(stale.dir, (day_ago, day_ago))
    settings = Settings(host_copy_dir=str(tmp_path), host_copy_max_age_s=86400)
    mine = host_copy.node_copy("s3://bucket/runs/new", settings, sweep=True)
    assert not os.path.exists(stale.dir)
    assert os.path.isdir(os.path.join(live.dir, step_dirname(20)))
    # A node's other ranks do not sweep; the sweeping run's own copies are never touched.
    os.utime(live.dir, (day_ago, day_ago))
    host_copy.node_copy("s3://bucket/runs/new", settings, sweep=False)
    assert os.path.isdir(live.dir)
    _write(mine, 40)
    os.utime(mine.dir, (day_ago, day_ago))
    assert mine.sweep(86400) == [live.dir]
    assert os.path.isdir(os.path.join(mine.dir, step_dirname(40)))


def test_the_sweep_leaves_a_copy_being_written(tmp_path):
    """A run that checkpoints less than daily is still live while it writes a copy."""
    slow = HostCopy("s3://bucket/runs/daily", str(tmp_path))
    slow.staging()  # a copy being written now
    old = os.path.getmtime(slow.dir) - 2 * 86400
    os.utime(slow.dir, (old, old))
    assert HostCopy("s3://bucket/runs/new", str(tmp_path)).sweep(86400) == []
    assert os.path.isdir(slow.dir)


def test_copies_are_per_user_and_private(tmp_path):
    """A node is shared: each user's copies in a directory of their own, mode 0700 (one
    left 0755 by an older raytf is closed), so no other user reads a model from it."""
    mine = tmp_path / f"raytf-checkpoints-{os.getuid()}"
    mine.mkdir(mode=0o755)
    os.chmod(mine, 0o755)
    copies = [HostCopy(f"s3://bucket/runs/{n}", str(tmp_path)) for n in ("a", "b")]
    for copy in copies:
        _write(copy, 10)
    assert os.listdir(tmp_path) == [mine.name]
    assert os.stat(mine).st_mode & 0o777 == 0o700
    assert {os.path.dirname(c.dir) for c in copies} == {str(mine)}
    assert all(os.stat(c.dir).st_mode & 0o077 == 0 for c in copies)


def test_the_newest_committed_copy_outlives_newer_saves_waiting_for_their_commit(tmp_path):
    """A stalled store: step 20 committed, then saves of 40, 60 and 80 kept here while
    their commits waited. Keeping only the newest two dropped 20's copy, and the restart
    from 20 read the bucket (the object-storage fault test saw both ranks do so). The
    newest committed copy stays beside the newest two."""
    committed = {20}
    copy = HostCopy("s3://bucket/runs/a", str(tmp_path), committed=committed.__contains__)
    _, manifest = _write(copy, 20)
    for step in (40, 60, 80):
        _write(copy, step)
    kept = sorted(n for n in os.listdir(copy.dir) if not n.startswith("."))
    assert kept == [step_dirname(s) for s in (20, 60, 80)]
    assert copy.find(step_dirname(20), manifest)
    committed.add(60)  # 60 commits: 20 is no longer the newest committed copy
    _write(copy, 100)
    kept = sorted(n for n in os.listdir(copy.dir) if not n.startswith("."))
    assert kept == [step_dirname(s) for s in (60, 80, 100)]


def test_a_late_write_of_a_committed_step_never_replaces_its_copy(tmp_path):
    """A writer past the "is it committed?" check when the commit landed keeps its own
    copy of that step: the manifest names the first, which must stay (else the restart
    finds no copy it names and downloads)."""
    copy = HostCopy("s3://bucket/runs/a", str(tmp_path), committed={20}.__contains__)
    first, manifest = _write(copy, 20, b"committed")
    late, _ = _write(copy, 20, b"late write")
    assert late == first and copy.find(step_dirname(20), manifest)
    with open(os.path.join(copy.dir, step_dirname(20), "ckpt.data-00000-of-00001"), "rb") as f:
        assert f.read() == b"committed"
    assert not [n for n in os.listdir(copy.dir) if n.startswith(".staging")]


def test_a_store_that_cannot_answer_keeps_the_older_copy(tmp_path):
    def unreachable(step):
        raise ConnectionError("the endpoint stopped answering")

    copy = HostCopy("s3://bucket/runs/a", str(tmp_path), committed=unreachable)
    for step in (20, 40, 60):
        _write(copy, step)
    kept = sorted(n for n in os.listdir(copy.dir) if not n.startswith("."))
    assert kept == [step_dirname(s) for s in (20, 40, 60)]
