"""A real local Ray instance for the integration tier: own temp dir, loopback, dashboard
(for Ray's state API), torn down at the end of the session."""

import os
import shutil
import socket
import tempfile

import pytest
import ray
from ray import cloudpickle

import jobs.train_digits as train_digits
import jobs.train_keras as train_keras
import jobs.train_ray_data as train_ray_data
import jobs.train_synthetic as train_synthetic
import jobs.train_tf_keras as train_tf_keras

# Ray's own test, kept as data: test_ray_examples.py runs it moved, in a process of its own.
collect_ignore = ["ray_upstream"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return s.getsockname()[1]


NODE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "raytf-node-key",
    "AWS_SECRET_ACCESS_KEY": "raytf-node-own-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _restore(saved: dict) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def ray_cluster():
    # Workers import this module's functions by value: they need not find jobs/ on sys.path.
    for module in (train_synthetic, train_keras, train_tf_keras, train_digits, train_ray_data):
        cloudpickle.register_pickle_by_value(module)
    temp_dir = tempfile.mkdtemp(prefix="rtt-", dir="/tmp")
    # The nodes' own credentials for the S3 server (the workers' default chain, as an
    # instance role gives them): the raylet inherits them at its start, this process not.
    saved = {k: os.environ.get(k) for k in NODE_CREDENTIALS}
    os.environ.update(NODE_CREDENTIALS)
    ray.init(
        num_cpus=4,
        _temp_dir=temp_dir,
        _node_ip_address="127.0.0.2",
        include_dashboard=True,
        dashboard_host="127.0.0.2",
        dashboard_port=_free_port(),
        log_to_driver=True,
        # Custom metrics reach the node's Prometheus endpoint within a second, not ten.
        _system_config={"metrics_report_interval_ms": 1000},
    )
    _restore(saved)
    ray.node_secret = NODE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]  # what the workers hold
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster_env(ray_cluster):
    """Environment for a driver process of its own that joins the session's cluster."""
    return {"RAY_ADDRESS": ray.get_runtime_context().gcs_address, "RAY_AUTH_MODE": "token"}


@pytest.fixture
def storage(tmp_path):
    path = tmp_path / "runs"
    path.mkdir()
    return str(path)


@pytest.fixture(scope="session")
def reference(cluster_env, tmp_path_factory):
    """The uninterrupted run of the fault tests' job (``jobrun.FAULT_ARGS``, without its
    pause after each step) that every faulty run must match, on any cluster: CPU ops here
    are deterministic."""
    from .jobrun import REFERENCE_ARGS, JobRun

    storage = str(tmp_path_factory.mktemp("ref"))
    run = JobRun(storage, "ref", *REFERENCE_ARGS, env=cluster_env).start()
    rc, summary = run.finish()
    assert rc == 0 and summary, run.output()[-3000:]
    assert summary["attempts"] == 1 and summary["digests_agree"]
    return dict(summary, output=run.output())  # what its user saw (test_observability)


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """moto's S3 server on loopback for the session, its environment set for this process
    (the in-process drivers) and handed to job subprocesses; stopped by pid at the end.
    The workers' host copies go to a directory of the session's own in host memory
    (``server.host_copies``), removed at the end, as runs the tests kill leave theirs."""
    from raytf.bench.loopback_s3 import S3Server
    from raytf.rundir.storage import refresh_fsspec_env

    server = S3Server(str(tmp_path_factory.mktemp("moto"))).start()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    server.host_copies = tempfile.mkdtemp(prefix="raytf-test-copies-", dir=shm)
    server.env["RAYTF_HOST_COPY_DIR"] = server.host_copies
    saved = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)
    refresh_fsspec_env()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.host_copies, ignore_errors=True)
        _restore(saved)
        refresh_fsspec_env()


# The Keras resume test's job (jobs/train_keras.py): 3 epochs of 32 steps, validated; its
# checkpoints every 20 steps fall mid-epoch. The same run in-process is the reference.
KERAS_REFERENCE = {"epochs": 3, "steps_per_epoch": 32, "seed": 4, "batch_size": 128}


@pytest.fixture(scope="session")
def keras_reference(ray_cluster, tmp_path_factory):
    """The uninterrupted KerasTrainer run that the Keras resume test must end as, with the
    weights the metric test checks: one run serves both."""
    import raytf

    cfg = KERAS_REFERENCE
    config = {"seed": cfg["seed"], "lr": 1e-3, "batch_size": cfg["batch_size"]}
    storage = str(tmp_path_factory.mktemp("keras-ref"))
    return raytf.KerasTrainer(
        train_keras.build_model,
        train_keras.dataset_fn,
        global_batch_size=cfg["batch_size"],
        epochs=cfg["epochs"],
        steps_per_epoch=cfg["steps_per_epoch"],
        validation_fn=train_keras.validation_fn,
        report_every=4,
        train_loop_config=config,
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(name="keras-ref", storage_path=storage, verbose=0),
    ).fit()
