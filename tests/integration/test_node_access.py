"""Every node's workers can reach the run's object store with their own credentials,
checked where they land before the first step.

A cloud launcher gives its instance profile to the head only: the driver's storage
check passes there, and each worker's first upload failed after the whole group had
started. Here one node of a local cluster runs with no AWS credentials at all (its
``ray start`` under ``env -u``, the instance-metadata lookup off), the others with the
loopback S3 server's; the driver forwards none (raytf's default). The run must stop at
placement, naming that node and what it could not do, before any worker starts; and a
node that joins a running run's cluster without credentials is refused, naming it, at
the restart that would place a worker there.
"""

import os
import subprocess
import sys
import time

import pytest

from raytf.rundir.storage import Storage
from raytf.tools.local.cluster import SIMULATED_HEALTH_CHECK, LocalCluster

from .jobrun import JOB, JobRun, node_of

pytestmark = pytest.mark.slow

HEALTH = SIMULATED_HEALTH_CHECK  # a node's loss is not the point: found in seconds

NO_CREDENTIALS = [
    "env",
    "-u",
    "AWS_ACCESS_KEY_ID",
    "-u",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_EC2_METADATA_DISABLED=true",  # no instance metadata to ask on this machine
    "AWS_SHARED_CREDENTIALS_FILE=/nonexistent",
    "AWS_CONFIG_FILE=/nonexistent",
]


def test_a_node_whose_workers_cannot_reach_the_bucket_is_refused_before_start(s3, tmp_path):
    """One cluster, two runs (a node's start is the costly part):

    1. two nodes with credentials; a run trains; a node without joins and the node of
       rank 1 is SIGKILLed: the restart, whose rank 1 can only land on the new node, is
       refused naming it (attempt 2), nothing written there;
    2. a new run on what is left (the node with credentials and the one without) is
       refused at placement, before any worker starts."""
    bucket = s3.make_bucket("raytf-access")
    url = f"s3://{bucket}/runs"
    with LocalCluster(2, cpus_per_node=1, head_cpus=0, system_config=HEALTH) as cluster:
        env = dict(os.environ, **s3.env, **cluster.client_env())
        args = ["--workers", "2", "--steps", "400", "--step-sleep", "0.05"]
        joined = JobRun(url, "joined", *args, "--max-failures", "3", env=env, logs=str(tmp_path))
        try:
            state = joined.start().wait_for(step=10)
            bare = cluster.add_node(cpus=1, wrap=NO_CREDENTIALS)
            lost = node_of(cluster, state, 1)
            cluster.kill_node(cluster.nodes.index(lost))
            rc, _ = joined.finish(timeout=240)
        finally:
            joined.stop()
        out = joined.output()
        assert rc != 0 and "the workers cannot use the run's storage" in out, out[-3000:]
        assert f"node {bare.ip}" in out and "could not write: NoCredentialsError" in out
        assert Storage(joined.run_dir).read_json("state.json")["attempt"] == 2
        good = next(n for n in cluster.nodes[1:] if n.alive and n.ip != bare.ip)

        cmd = [sys.executable, JOB, "--workers", "2", "--steps", "8", "--name", "access"]
        cmd += ["--storage", url]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        took = time.monotonic() - t0
    assert proc.returncode != 0
    err = proc.stderr
    assert "the workers cannot use the run's storage" in err, err[-3000:]
    assert f"node {bare.ip}" in err and "could not write: NoCredentialsError" in err
    assert f"node {good.ip} (" not in err, err[-3000:]  # the node with credentials passed
    assert "attempt 1: 2 workers" not in err  # refused before any worker started
    assert took < 120, took
    names = s3.filesystem().find(f"{bucket}/runs", detail=False)
    assert not [n for n in names if ".raytf-access-" in n]  # no probe left behind
