"""Storage's remote (fsspec) branch on the in-process memory:// filesystem, and local roots."""

import json
import os
import uuid

import pytest

from raytf.checkpoint.layout import (
    CKPT_DIR,
    MANIFEST,
    commit,
    latest_intact,
    list_step_dirs,
    parse_step_dirname,
    step_dirname,
    verify,
)
from raytf.checkpoint.retention import prune
from raytf.messages import CheckpointPart
from raytf.rundir.storage import Storage


@pytest.fixture
def remote():
    """A fresh root in fsspec's process-wide memory store, removed afterwards."""
    storage = Storage(f"memory://bucket/run-{uuid.uuid4().hex}")
    yield storage
    storage.remove()
    leftovers = [*storage.fs.store, *storage.fs.pseudo_dirs]
    assert not [k for k in leftovers if k.startswith(storage.root)]


def write_remote_parts(storage: Storage, step: int, world: int = 2) -> list[CheckpointPart]:
    """What the workers do, on remote storage: the chief's TF files, every rank's state file."""
    d = (CKPT_DIR, step_dirname(step))
    parts = []
    for rank in range(world):
        files = {}
        if rank == 0:
            for name, data in (("ckpt.index", b"i" * 10), ("ckpt.data-00000-of-00001", b"d" * 100)):
                storage.write_atomic(data, *d, name)
                files[name] = len(data)
        storage.write_atomic(b"{}", *d, f"state_rank{rank}.json")
        files[f"state_rank{rank}.json"] = 2
        parts.append(CheckpointPart(rank, step, files, 0.01))
    return parts


# -- the remote branch ---------------------------------------------------------------------
def test_memory_root_is_remote_and_urls_keep_the_scheme(remote):
    assert not remote.local
    assert remote.root.startswith("/bucket/run-")
    assert remote.path("a", "b") == f"{remote.root}/a/b"
    assert remote.url() == f"memory://{remote.root}"
    assert remote.url("a", "b") == f"memory://{remote.root}/a/b"
    # A URL it hands out opens the same place in another Storage (another process's view).
    remote.write_atomic(b"xyz", "a", "b")
    again = Storage(remote.url("a"))
    assert not again.local
    assert again.listdir() == ["b"]
    assert again.size("b") == 3


def test_makedirs_exists_listdir(remote):
    assert not remote.exists("d")
    assert remote.listdir("d") == []  # a missing directory lists as empty, no error
    remote.makedirs("d", "sub")
    assert remote.exists("d")
    assert remote.exists("d", "sub")
    for name in ("zeta", "alpha", "mid"):
        remote.write_atomic(name.encode(), "d", name)
    assert remote.listdir("d") == ["alpha", "mid", "sub", "zeta"]  # sorted base names
    assert remote.listdir() == ["d"]


def test_size_json_and_atomic_replace(remote):
    remote.write_atomic(b"0123456789", "f.bin")
    assert remote.size("f.bin") == 10
    remote.write_atomic(b"ab", "f.bin")  # replaced whole, not overwritten in place
    assert remote.size("f.bin") == 2
    with remote.fs.open(remote.path("f.bin"), "rb") as f:
        assert f.read() == b"ab"

    doc = {"step": 7, "files": {"ckpt.index": 10}, "nested": [1, 2.5, None]}
    remote.write_json_atomic(doc, "deep", "er", "doc.json")  # parents made on the way
    assert remote.read_json("deep", "er", "doc.json") == doc
    remote.write_json_atomic({"step": 8}, "deep", "er", "doc.json")
    assert remote.read_json("deep", "er", "doc.json") == {"step": 8}


def test_remove_is_recursive_and_ignores_missing(remote):
    remote.write_atomic(b"1", "top", "a")
    remote.write_atomic(b"2", "top", "inner", "b")
    remote.write_atomic(b"3", "keep")
    remote.remove("top")
    assert not remote.exists("top")
    assert not remote.exists("top", "inner", "b")
    assert remote.listdir() == ["keep"]
    remote.remove("never-there")  # no error
    assert remote.listdir() == ["keep"]


def test_upload_and_download_dir_round_trip_bytes(remote, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    payload = {"a.bin": os.urandom(4096), "b.json": b'{"k": 1}', "empty": b""}
    for name, data in payload.items():
        (src / name).write_bytes(data)
    remote.upload_dir(str(src), "up", "step")
    assert remote.listdir("up", "step") == sorted(payload)
    assert {n: remote.size("up", "step", n) for n in payload} == {
        n: len(d) for n, d in payload.items()
    }

    dst = tmp_path / "made" / "by" / "download"
    remote.download_dir(str(dst), "up", "step")
    assert sorted(os.listdir(dst)) == sorted(payload)
    for name, data in payload.items():
        assert (dst / name).read_bytes() == data

    missing = tmp_path / "from-missing"
    remote.download_dir(str(missing), "no", "such")
    assert os.listdir(missing) == []


# -- committed checkpoints on remote storage ---------------------------------------------
def test_step_dirnames_round_trip():
    assert step_dirname(20) == "step_000000020"
    assert parse_step_dirname(step_dirname(123456)) == 123456
    assert parse_step_dirname("step_abc") is None
    assert parse_step_dirname(".tmp-step_000000001") is None


def test_commit_latest_and_prune_on_remote(remote):
    for step in (10, 20):
        commit(remote, write_remote_parts(remote, step), world_size=2, attempt=1)
    assert list_step_dirs(remote) == [10, 20]
    manifest = remote.read_json(CKPT_DIR, step_dirname(20), MANIFEST)
    assert manifest["files"] == {
        "ckpt.index": 10,
        "ckpt.data-00000-of-00001": 100,
        "state_rank0.json": 2,
        "state_rank1.json": 2,
    }
    assert verify(remote, 10)["step"] == 10
    latest = latest_intact(remote)
    assert latest.step == 20
    assert latest.path == f"memory://{remote.root}/{CKPT_DIR}/{step_dirname(20)}"

    removed = prune(remote, num_to_keep=1)
    assert removed == [10]
    assert list_step_dirs(remote) == [20]
    assert not remote.exists(CKPT_DIR, step_dirname(10))
    assert latest_intact(remote).step == 20


def test_truncated_file_on_remote_is_skipped(remote):
    for step in (10, 20):
        commit(remote, write_remote_parts(remote, step), world_size=2, attempt=1)
    remote.write_atomic(b"d" * 5, CKPT_DIR, step_dirname(20), "ckpt.data-00000-of-00001")
    assert verify(remote, 20) is None
    assert latest_intact(remote).step == 10


def test_uncommitted_remote_save_is_not_restored(remote):
    commit(remote, write_remote_parts(remote, 10), world_size=2, attempt=1)
    write_remote_parts(remote, 20)  # no manifest: the driver never committed it
    assert list_step_dirs(remote) == [10, 20]
    assert verify(remote, 20) is None
    assert latest_intact(remote).step == 10


def test_a_remote_checkpoint_downloads_whole(remote, tmp_path):
    commit(remote, write_remote_parts(remote, 30, world=1), world_size=1, attempt=2)
    latest = latest_intact(remote)
    Storage(latest.path).download_dir(str(tmp_path / "restore"))
    got = sorted(os.listdir(tmp_path / "restore"))
    assert got == sorted([*latest.manifest["files"], MANIFEST])
    with open(tmp_path / "restore" / MANIFEST) as f:
        assert json.load(f)["attempt"] == 2
    assert (tmp_path / "restore" / "ckpt.data-00000-of-00001").read_bytes() == b"d" * 100


# -- local roots ----------------------------------------------------------------------------
def test_file_url_is_a_plain_absolute_local_path(tmp_path):
    storage = Storage(f"file://{tmp_path}/run")
    assert storage.local
    assert storage.root == str(tmp_path / "run")
    assert storage.url("x") == os.path.join(str(tmp_path), "run", "x")
    storage.write_atomic(b"hello", "x")
    assert (tmp_path / "run" / "x").read_bytes() == b"hello"


def test_home_and_relative_paths_resolve_to_absolute(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    home = Storage("~/runs/r1")
    assert home.local
    assert home.root == str(tmp_path / "home" / "runs" / "r1")
    assert os.path.isabs(home.url())

    monkeypatch.chdir(tmp_path)
    rel = Storage("rel/run")
    assert rel.root == str(tmp_path / "rel" / "run")
    rel.write_json_atomic({"ok": True}, "d", "f.json")
    assert json.loads((tmp_path / "rel" / "run" / "d" / "f.json").read_text()) == {"ok": True}
    assert not any(n.startswith(".tmp-") for n in os.listdir(tmp_path / "rel" / "run" / "d"))
