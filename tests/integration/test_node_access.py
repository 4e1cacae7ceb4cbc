"""Every node's workers can reach the run's object store with their own credentials,
checked where they land before the first step.

A cloud launcher gives its instance profile to the head only: the driver's storage
check passes there, and each worker's first upload failed after the whole group had
started. Here one node of a local cluster runs with no AWS credentials at all (its
``ray start`` under ``env -u``, the instance-metadata lookup off), the others with the
loopback S3 server's; the driver forwards none (raytf's default). The run must stop at
placement, naming that node and what it could not do, before any worker starts.
"""

import os
import subprocess
import sys
import time

import pytest

from raytf.tools.local.cluster import LocalCluster

from .jobrun import JOB

pytestmark = pytest.mark.slow

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


def test_a_node_whose_workers_cannot_reach_the_bucket_is_refused_before_start(s3):
    bucket = s3.make_bucket("raytf-access")
    with LocalCluster(1, cpus_per_node=1, head_cpus=0) as cluster:
        good = cluster.nodes[1]  # the loopback S3 server's credentials, from this process
        bare = cluster.add_node(cpus=1, wrap=NO_CREDENTIALS)
        env = dict(os.environ, **s3.env, **cluster.client_env())
        cmd = [sys.executable, JOB, "--workers", "2", "--steps", "8", "--name", "access"]
        cmd += ["--storage", f"s3://{bucket}/runs"]
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
    names = s3.filesystem().ls(f"{bucket}/runs/access", detail=False)
    assert not [n for n in names if ".raytf-access-" in n]  # no probe left behind
