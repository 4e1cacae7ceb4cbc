"""Runs on object storage: a real S3-compatible endpoint on loopback (moto's server, the
``s3`` fixture) reached through s3fs, as a user reaches S3. Faults from outside: a
worker SIGKILLed, the driver SIGKILLed and rerun, the endpoint stopped mid-run."""

import os
import re
import signal
import time

import pytest

import raytf
from raytf.rundir.checkpoints import latest_intact, verify
from raytf.rundir.storage import Storage, refresh_fsspec_env

from .jobrun import FAULT_ARGS, JobRun
from .test_recovery import assert_same_result


def committed_steps(storage: Storage) -> list[int]:
    """Steps of the committed checkpoints in the bucket, each checked whole."""
    from raytf.rundir.checkpoints import committed

    steps = committed(storage)
    assert all(verify(storage, s) is not None for s in steps), "a committed checkpoint is damaged"
    return steps


def _loop(config):
    raise AssertionError("never runs: the storage check refuses the run first")


@pytest.mark.parametrize(
    "url, why",
    [
        ("nosuch://bucket/runs", "no filesystem is known for nosuch://"),
        ("gs://bucket/runs", r"pip install 'raytf\[gcs\]'"),  # gcsfs is not installed here
        ("s3://no-such-bucket/runs", "bucket 'no-such-bucket' does not exist"),
    ],
)
def test_bad_storage_urls_fail_before_anything_starts(s3, tmp_path, monkeypatch, url, why):
    monkeypatch.chdir(tmp_path)  # the old bug: a URL became a local folder named after it
    trainer = raytf.Trainer(_loop, run_config=raytf.RunConfig(name="bad", storage_path=url))
    t0 = time.monotonic()
    with pytest.raises(raytf.ConfigError, match=why) as info:
        trainer.fit()
    assert time.monotonic() - t0 < 15
    assert f"RunConfig.storage_path = {url!r}" in str(info.value)
    assert os.listdir(tmp_path) == []


def test_unreachable_endpoint_and_unwritable_path_are_config_errors(s3, tmp_path, monkeypatch):
    closed = f"http://127.0.0.2:{_closed_port()}"
    s3.make_bucket("reachable-only-elsewhere")
    trainer = raytf.Trainer(
        _loop,
        run_config=raytf.RunConfig(name="r", storage_path="s3://reachable-only-elsewhere/runs"),
    )
    with monkeypatch.context() as env:
        env.setenv("FSSPEC_S3_ENDPOINT_URL", closed)
        t0 = time.monotonic()
        with pytest.raises(raytf.ConfigError, match="EndpointConnectionError.*FSSPEC_S3_"):
            trainer.fit()
        assert time.monotonic() - t0 < 15  # not the client's ~30 s of retries
    refresh_fsspec_env()  # the server's endpoint again, for the tests after this one
    assert Storage(f"s3://{s3.make_bucket('reachable-again')}/x").listdir() == []
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    trainer = raytf.Trainer(
        _loop, run_config=raytf.RunConfig(name="r", storage_path=str(blocker / "runs"))
    )
    with pytest.raises(raytf.ConfigError, match="cannot write the run directory"):
        trainer.fit()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return s.getsockname()[1]  # closed again when this returns: nothing listens there


@pytest.mark.slow
def test_s3_run_resumes_after_a_sigkill_and_a_killed_driver(s3, reference, cluster_env, tmp_path):
    """The fault tests' job on S3: a worker SIGKILLed (the restart reads the TF files
    from the node's host copy, the rest from the bucket), then the driver SIGKILLed, the
    host copies damaged, and the job run again (the new driver finds the run in the
    bucket, the workers pass over the damaged copy and download); the weights end as an
    uninterrupted local run's, and the bucket holds only committed, whole, pruned
    checkpoints."""
    bucket = s3.make_bucket("raytf-faults")
    url = f"s3://{bucket}/runs"
    # Every rank's line of where it restored from: Ray would fold the second into the first.
    env = {**cluster_env, **s3.env, "RAY_DEDUP_LOGS": "0"}
    args = [*FAULT_ARGS, "--max-failures", "3", "--keep", "2"]
    run = JobRun(url, "s3k", *args, env=env, logs=str(tmp_path)).start()
    try:
        run.signal_worker(1, signal.SIGKILL, run.wait_for(step=45))
        run.wait_for(step=110, attempt=2)
        run.kill_driver()
    finally:
        run.stop()
    restored = re.findall(r"rank (\d) restored step \d+ from (.+) in", run.output())
    assert sorted(restored) == [("0", "host memory"), ("1", "host memory")], restored
    damaged = 0
    for root, _, names in os.walk(s3.host_copies):
        for name in names:
            if name.startswith("ckpt.data"):
                with open(os.path.join(root, name), "r+b") as f:
                    f.truncate(7)
                damaged += 1
    assert damaged >= 1
    again = JobRun(url, "s3k", *args, env=env, logs=str(tmp_path)).start()
    try:
        rc, summary = again.finish()
    finally:
        again.stop()
    assert rc == 0, again.output()[-3000:]
    # The log files are the run's: the rerun's lines follow the first run's.
    restored = re.findall(r"rank (\d) restored step \d+ from (.+) in", again.output())[2:]
    assert sorted(restored) == [("0", "storage"), ("1", "storage")], restored
    assert_same_result(summary, reference)
    assert summary["run_dir"] == f"{url}/s3k" and summary["checkpoint"].startswith("s3://")
    assert summary["attempts"] >= 3  # the rerun continued the run's attempts
    storage = Storage(f"{url}/s3k")
    steps = committed_steps(storage)
    assert len(steps) == 2 and steps[-1] == 160  # pruned to --keep, the last at the end
    assert latest_intact(storage).step == 160
    assert not os.path.exists(os.path.join(os.getcwd(), "s3:")), "nothing lands locally"


@pytest.mark.slow
def test_endpoint_stopped_mid_run_costs_time_not_checkpoints(s3, reference, cluster_env, tmp_path):
    """SIGSTOP the storage endpoint for 8 s while the job checkpoints every 20 steps: the
    uploads wait (and retry) until it answers again, the run finishes with the weights of
    an uninterrupted run, and every checkpoint committed is whole."""
    bucket = s3.make_bucket("raytf-paused")
    url = f"s3://{bucket}/runs"
    env = {**cluster_env, **s3.env}
    run = JobRun(url, "pause", *FAULT_ARGS, "--keep", "20", env=env, logs=str(tmp_path)).start()
    try:
        run.wait_for(step=50)
        s3.pause()
        time.sleep(8)
        s3.resume()
        rc, summary = run.finish()
    finally:
        s3.resume()
        run.stop()
    assert rc == 0, run.output()[-3000:]
    assert_same_result(summary, reference)
    assert summary["attempts"] == 1
    assert committed_steps(Storage(f"{url}/pause")) == list(range(20, 161, 20))


@pytest.mark.slow
def test_sigkill_during_an_async_persist_keeps_the_previous_checkpoint(
    s3, reference, cluster_env, tmp_path
):
    """The chief SIGKILLed while its asynchronous save is being uploaded (the endpoint is
    stopped, so the upload hangs): that save is never committed, the restart resumes
    from the newest checkpoint committed before it, and the run ends with an
    uninterrupted run's weights."""
    bucket = s3.make_bucket("raytf-persist")
    url = f"s3://{bucket}/runs"
    env = {**cluster_env, **s3.env}
    # Without the survivors' emergency checkpoint, which would supersede the lost save.
    args = [*FAULT_ARGS, "--max-failures", "2", "--keep", "20", "--no-emergency-checkpoint"]
    run = JobRun(url, "persist", *args, env=env, logs=str(tmp_path)).start()
    storage = Storage(f"{url}/persist")
    try:
        state = run.wait_for(step=45)
        deadline = time.monotonic() + 60
        while 40 not in committed_steps(storage):
            assert time.monotonic() < deadline, "step 40 never committed"
            time.sleep(0.2)
        before = committed_steps(storage)
        chief = next(w["pid"] for w in state["workers"] if w["rank"] == 0)
        s3.pause()
        try:
            time.sleep(3)  # training goes on past the next save, whose upload hangs
            os.kill(chief, signal.SIGKILL)
            time.sleep(0.5)
        finally:
            s3.resume()
        rc, summary = run.finish()
    finally:
        s3.resume()
        run.stop()
    assert rc == 0, run.output()[-3000:]
    assert summary["attempts"] == 2 and len(summary["failures"]) == 1
    assert_same_result(summary, reference)
    # A save whose parts were stored before the pause may still commit as the endpoint
    # comes back, so the resumed step is read from the run, then checked against it.
    found = re.search(r"resuming after step (\d+)", run.output())
    assert found, run.output()[-3000:]
    resumed = int(found.group(1))
    assert resumed >= max(before)  # nothing committed before the pause was lost
    first = [
        s
        for s in committed_steps(storage)
        if storage.read_json("checkpoints", f"step_{s:09d}", "manifest.json")["attempt"] == 1
    ]
    assert max(first) == resumed  # the restart took the newest commit, nothing partial
    steps = committed_steps(storage)
    later = [s for s in steps if s > resumed]
    assert later and all(
        storage.read_json("checkpoints", f"step_{s:09d}", "manifest.json")["attempt"] == 2
        for s in later
    )
