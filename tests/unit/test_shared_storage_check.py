"""The shared-storage check's answers: a node that sees another disk ends the run
(``ConfigError``), a node where the check could not run costs an attempt and is asked
again. Ray's part (the probe task on each node) runs in tests/integration/test_shared_storage.py."""

import os

import cloudpickle
import pytest

from raytf.errors import ConfigError, WorkerSetupError
from raytf.group import shared_storage

UNPICKLE_WITHOUT_RAYTF = """
import pickle, sys
sys.modules["raytf"] = None  # an import of raytf fails here, as on a node without it
probe = pickle.loads(sys.stdin.buffer.read())
print(probe(sys.argv[1], b"token", sys.argv[2])[1])
"""


def test_the_probe_travels_by_value_so_a_node_without_raytf_runs_it(tmp_path):
    """Pickled by reference, the task imported raytf on the node: on a node without it
    (what shipping the package is for) the check failed and ended the run."""
    import subprocess
    import sys

    path, reply = tmp_path / "probe", tmp_path / "reply"
    path.write_bytes(b"token")
    ran = subprocess.run(
        [sys.executable, "-c", UNPICKLE_WITHOUT_RAYTF, str(path), str(reply)],
        input=cloudpickle.dumps(shared_storage._probe()),
        capture_output=True,
    )
    assert ran.returncode == 0 and ran.stdout.strip() == b"None", ran.stderr[-2000:]
    assert reply.read_bytes() == b"token"


@pytest.fixture
def check(monkeypatch):
    nodes = [{"NodeID": n, "NodeManagerAddress": f"10.0.0.{i}"} for i, n in enumerate("ab")]
    monkeypatch.setattr(shared_storage, "alive_nodes", lambda: nodes)
    made = object.__new__(shared_storage.SharedStorageCheck)
    made.directory, made.storage_path, made.checked = "/runs/x", "/runs", {"driver"}
    return made


def test_a_node_the_check_could_not_reach_costs_an_attempt_not_the_run(check, monkeypatch):
    answers = {"now": ([], ["node 10.0.0.1 (b): RayTaskError: node died"])}
    monkeypatch.setattr(shared_storage, "unshared_on", lambda d, n: answers["now"])
    with pytest.raises(WorkerSetupError, match="did not run on node 10.0.0.1"):
        check({"a", "b"})
    assert check.checked == {"driver"}  # asked again at the next attempt
    answers["now"] = ([], [])
    check({"a", "b"})
    assert check.checked == {"driver", "a", "b"}


def test_a_node_that_sees_another_disk_ends_the_run(check, monkeypatch):
    monkeypatch.setattr(
        shared_storage, "unshared_on", lambda d, n: (["node 10.0.0.1: holds other bytes"], [])
    )
    with pytest.raises(ConfigError, match="not the same storage on every node"):
        check({"a", "b"})


UNPICKLE_ACCESS = """
import pickle, sys
sys.modules["raytf"] = None  # an import of raytf fails here, as on a node without it
probe = pickle.loads(sys.stdin.buffer.read())
print(probe(sys.argv[1], "t0k3n", {"RAYTF_ACCESS_PROBE": "1"})[1])
"""


@pytest.mark.parametrize(
    "url,answer",
    [("{tmp}", "None"), ("nosuchstore://bucket/run", "could not open the store: ValueError")],
)
def test_the_access_probe_writes_reads_deletes_and_names_what_failed(tmp_path, url, answer):
    """The task each node runs before its workers' first step, unpickled where raytf is
    not importable: on a store it can use, it leaves nothing behind; else it names the
    step it could not take."""
    import subprocess
    import sys

    from raytf.group import storage_access

    ran = subprocess.run(
        [sys.executable, "-c", UNPICKLE_ACCESS, url.format(tmp=tmp_path)],
        input=cloudpickle.dumps(storage_access._probe()),
        capture_output=True,
        text=False,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.decode().strip().startswith(answer)
    assert os.listdir(tmp_path) == []  # the probe object is gone
