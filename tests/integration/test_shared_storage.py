"""A local storage path on a multi-node cluster must be one storage for every node.

The local simulation shares one disk and would hide the problem, so one node here
runs in a mount namespace of its own with a private tmpfs over the storage path: its
processes see an empty directory where the driver writes. A run there must be refused
before any worker starts, naming that node and suggesting a shared mount or an
object store (instead of checkpoints the driver finds damaged and restarts from 0).
"""

import os
import shutil
import subprocess
import sys
import time

import pytest

from raytf.tools.local.cluster import LocalCluster

from .jobrun import JOB

pytestmark = pytest.mark.slow


def private_mount(directory: str) -> list[str]:
    """Run a node under its own mount namespace with an empty tmpfs over ``directory``."""
    script = f'mount -t tmpfs raytf-private "{directory}" && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh"]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a private mount namespace needs root and util-linux's unshare",
)
def test_a_path_one_node_does_not_share_is_refused_before_start(tmp_path):
    storage = tmp_path / "runs"
    storage.mkdir()
    with LocalCluster(1, cpus_per_node=1, head_cpus=1) as cluster:
        private = cluster.add_node(cpus=1, wrap=private_mount(str(storage)))
        env = dict(os.environ, **cluster.client_env())
        cmd = [sys.executable, JOB, "--workers", "2", "--steps", "8", "--storage", str(storage)]
        t0 = time.monotonic()
        proc = subprocess.run(cmd + ["--name", "x"], env=env, capture_output=True, text=True)
        took = time.monotonic() - t0
    assert proc.returncode != 0
    err = proc.stderr
    assert "not the same storage on every node" in err, err[-3000:]
    assert f"node {private.ip}" in err  # the node that sees another directory is named
    assert "shared mount" in err and "s3://" in err
    assert "attempt 1" not in err  # refused before any worker started
    # Measured 19.5 s for the whole test (CI, 2 cores), cluster start included; a start
    # that got as far as its workers would add their imports and the run.
    assert took < 60
    assert os.listdir(storage) == ["x"] and os.listdir(storage / "x") == []  # no probe left


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a private mount namespace needs root and util-linux's unshare",
)
def test_a_node_that_joins_later_is_checked_when_a_worker_lands_on_it(tmp_path):
    """Two nodes that share the path pass the launch check; one is lost mid-run and the
    only room left for the restart is a node that joined since, with a directory of its
    own: the attempt that places a worker there stops, naming it, before that worker
    writes (rather than a restart whose checkpoints the driver never sees)."""
    storage = tmp_path / "runs"
    storage.mkdir()
    with LocalCluster(1, cpus_per_node=1, head_cpus=1) as cluster:
        env = dict(os.environ, **cluster.client_env())
        cmd = [sys.executable, JOB, "--workers", "2", "--steps", "2000", "--step-sleep", "0.05"]
        cmd += ["--storage", str(storage), "--name", "y", "--max-failures", "3"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            state = storage / "y" / "state.json"
            deadline = time.monotonic() + 120
            while b'"RUNNING"' not in (state.read_bytes() if state.exists() else b""):
                assert proc.poll() is None and time.monotonic() < deadline, "never ran"
                time.sleep(0.5)
            private = cluster.add_node(cpus=1, wrap=private_mount(str(storage)))
            cluster.kill_node(1)
            _, err = proc.communicate(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    err = err.decode()
    assert proc.returncode != 0
    assert "not the same storage on every node" in err, err[-3000:]
    assert f"node {private.ip}" in err
