"""A cluster started separately with `ray start` (two nodes, fake GPUs), joined by address,
and the same job sent with `ray job submit`."""

import json
import os
import subprocess
import sys

import pytest

from raytf.tools.local.cluster import LocalCluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(ROOT, "jobs", "train_synthetic.py")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_gpu_nodes():
    # Each node declares one GPU: the scheduler and device selection treat them as real.
    with LocalCluster(num_nodes=1, cpus_per_node=2, gpus_per_node=1, head_gpus=1) as cluster:
        yield cluster


def run_job(prefix: list[str], env: dict, storage, name: str, *extra: str) -> tuple[dict, str]:
    """Run the main example (16 steps, 2 workers); return its JSON summary and all output."""
    cmd = [*prefix, sys.executable, JOB, "--workers", "2", "--steps", "16"]
    cmd += ["--storage", str(storage), "--name", name, *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    lines = [line for line in proc.stdout.strip().splitlines() if line.startswith("{")]
    assert lines, out[-4000:]
    summary = json.loads(lines[-1])
    assert summary["digests_agree"] and summary["steps"] == 16
    return summary, out


def test_job_joins_cluster_by_address_one_gpu_worker_per_node(two_gpu_nodes, tmp_path):
    env = dict(os.environ, **two_gpu_nodes.client_env())
    _, out = run_job([], env, tmp_path, "addr", "--use-gpu")
    assert "Connecting to existing Ray cluster" in out

    with open(tmp_path / "addr" / "state.json") as f:
        workers = json.load(f)["workers"]
    # SPREAD over two nodes of one GPU each: one worker per node, each holding its GPU.
    assert sorted(w["node_ip"] for w in workers) == ["127.0.0.2", "127.0.0.3"]
    assert [w["gpu_ids"] for w in workers] == [["0"], ["0"]]


def test_same_job_through_ray_job_submit(two_gpu_nodes, tmp_path):
    env = dict(os.environ, RAY_AUTH_MODE=two_gpu_nodes.auth_mode)
    env.pop("RAY_ADDRESS", None)
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    submit = [ray_cli, "job", "submit", "--address", two_gpu_nodes.dashboard_url, "--"]
    _, out = run_job(submit, env, tmp_path, "job")
    assert "succeeded" in out
