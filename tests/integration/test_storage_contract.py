"""What raytf asks of a store, as one contract run on local disk and on the loopback S3
server (moto's server mode through s3fs, as a user's S3): write whole or not at all,
create only where nothing is (what makes "a manifest is never written twice" and "one
lease generation per driver" the store's rule), read, list, size, exists, remove. A new
backend passes these cases before raytf stores checkpoints on it."""

import threading
import uuid

import pytest

from raytf.rundir.storage import Storage

pytestmark = pytest.mark.slow


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return Storage(str(tmp_path / "run"))
    s3 = request.getfixturevalue("s3")
    bucket = s3.make_bucket(f"contract-{uuid.uuid4().hex[:8]}")
    return Storage(f"s3://{bucket}/run")


def test_a_write_is_read_back_whole_and_listed(store):
    store.write_json_atomic({"step": 5}, "checkpoints", "step_000000005", "manifest.json")
    store.write_atomic(b"x" * 1000, "checkpoints", "step_000000005", "ckpt.index")
    assert store.read_json("checkpoints", "step_000000005", "manifest.json") == {"step": 5}
    assert store.size("checkpoints", "step_000000005", "ckpt.index") == 1000
    assert store.listdir("checkpoints", "step_000000005") == ["ckpt.index", "manifest.json"]
    assert store.listdir("checkpoints") == ["step_000000005"]
    store.write_json_atomic({"step": 6}, "checkpoints", "step_000000005", "manifest.json")
    assert store.read_json("checkpoints", "step_000000005", "manifest.json") == {"step": 6}


def test_an_exclusive_create_writes_once_and_never_again(store):
    assert store.create_json_exclusive({"by": "first"}, "lease.generations", "000000001")
    assert not store.create_json_exclusive({"by": "second"}, "lease.generations", "000000001")
    assert store.read_json("lease.generations", "000000001") == {"by": "first"}
    assert store.create_exclusive(b"{}", "lease.generations", "000000002")


def test_of_writers_creating_one_name_at_once_exactly_one_wins(store):
    """Eight threads, one name, released together: one creates it, seven are told it
    exists, and the content is the winner's. On S3 the store decides (If-None-Match)."""
    start, won = threading.Barrier(8), []

    def create(n: int) -> None:
        start.wait()
        if store.create_json_exclusive({"by": n}, "race", "manifest.json"):
            won.append(n)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and store.read_json("race", "manifest.json") == {"by": won[0]}


def test_what_is_removed_is_gone_and_a_missing_name_is_no_error(store):
    store.write_atomic(b"1", "a", "b", "c")
    assert store.exists("a", "b", "c")
    store.remove("a")
    assert not store.exists("a", "b", "c") and store.listdir("a") == []
    store.remove("never-there")
    with pytest.raises(FileNotFoundError):
        store.read_json("never-there.json")
