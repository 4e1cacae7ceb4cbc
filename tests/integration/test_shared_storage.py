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
    assert took < 60
    assert os.listdir(storage) == ["x"] and os.listdir(storage / "x") == []  # no probe left
