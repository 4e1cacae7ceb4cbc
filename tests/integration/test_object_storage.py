"""Runs on object storage: a real S3-compatible endpoint on loopback (moto's server, the
``s3`` fixture) reached through s3fs, as a user reaches S3. Faults from outside: a
worker SIGKILLed, the driver SIGKILLed and rerun, the endpoint erroring, resetting,
stalling and slow mid-run (``fault_proxy``)."""

import contextlib
import io
import os
import re
import signal
import time

import pytest

import raytf
from raytf.checkpoint.layout import committed, latest_intact, verify
from raytf.rundir import segments
from raytf.rundir.run_log import RUN_LOG, read_run_log
from raytf.rundir.storage import Storage, refresh_fsspec_env
from raytf.tools.cli import main as cli

from .fault_proxy import FaultProxy
from .jobrun import FAULT_ARGS, JobRun
from .test_recovery import assert_same_result


def committed_steps(storage: Storage) -> list[int]:
    """Steps of the committed checkpoints in the bucket, each checked whole."""
    steps = committed(storage)
    assert all(verify(storage, s) is not None for s in steps), "a committed checkpoint is damaged"
    return steps


def _loop(config):
    raise AssertionError("never runs: the storage check refuses the run first")


@pytest.mark.parametrize(
    "url, why",
    [
        ("nosuch://bucket/runs", "no filesystem is known for nosuch://"),
        # gcsfs is not installed here
        ("gs://bucket/runs", r"pip install gcsfs \(raytf-mwms's gcs extra\)"),
        ("s3://no-such-bucket/runs", "bucket 'no-such-bucket' does not exist"),
    ],
)
def test_bad_storage_urls_fail_before_anything_starts(s3, tmp_path, monkeypatch, url, why):
    monkeypatch.chdir(tmp_path)  # the old bug: a URL became a local folder named after it
    trainer = raytf.Trainer(_loop, run_config=raytf.RunConfig(name="bad", storage_path=url))
    t0 = time.monotonic()
    with pytest.raises(raytf.ConfigError, match=why) as info:
        trainer.fit()
    # Measured 0.13 s (CI, 2 cores); a started group alone takes 10 s and more here.
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
        # Measured under 0.9 s (CI, 2 cores), against the client's ~30 s of retries.
        assert time.monotonic() - t0 < 15
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


RESTORED = re.compile(r"rank (\d) restored step \d+ from (.+) in")


@pytest.mark.slow
def test_storage_faults_a_lost_save_and_a_killed_driver_cost_time_not_checkpoints(
    s3, reference, cluster_env, tmp_path
):
    """The fault tests' job on S3, every client reaching the bucket through a proxy the
    test switches (``fault_proxy``):

    1. 4 s each of 503 SlowDown, connection resets and 0.3 s per chunk while the job
       trains, uploads, commits and writes its state;
    2. the endpoint stalled while training goes past the next save, and the chief
       SIGKILLed while that save's upload hangs: it is never committed, and the restart
       (its reads answered 503 at first) resumes from the newest commit before it,
       reading the TF files from the node's host copy, the rest from the bucket;
    3. the driver SIGKILLed, the host copies damaged, the job run again: the new driver
       finds the run in the bucket, the workers pass over the damaged copy and download.
    The weights end as an uninterrupted local run's; the bucket holds only committed,
    whole checkpoints, none marked bad; the only failure is the kill."""
    bucket = s3.make_bucket("raytf-faults")
    url = f"s3://{bucket}/runs"
    proxy = FaultProxy(s3.port).start()
    # Every rank's line of where it restored from: Ray would fold the second into the first.
    env = {**cluster_env, **s3.env, "FSSPEC_S3_ENDPOINT_URL": proxy.endpoint}
    env["RAY_DEDUP_LOGS"] = "0"
    pace = tmp_path / "pace"
    pace.touch()
    # Without the survivors' emergency checkpoint, which would supersede the lost save.
    args = [*FAULT_ARGS, "--keep", "20", "--max-failures", "3", "--no-emergency-checkpoint"]
    args += ["--step-sleep", "0.2", "--slow-while", str(pace)]
    run = JobRun(url, "s3k", *args, env=env, logs=str(tmp_path)).start()
    storage = Storage(f"{url}/s3k")  # the test's own view: straight to the server
    try:
        run.wait_for(step=25)
        for mode in ("503", "reset", "slow"):
            proxy.set(mode)
            time.sleep(4)
            proxy.set("pass")
            time.sleep(1)
        state = run.wait_for(step=1)
        before = committed_steps(storage)
        proxy.set("stall")
        time.sleep(6)  # ~22 steps at ~0.27 s: past the next save, whose upload hangs
        os.kill(next(w["pid"] for w in state["workers"] if w["rank"] == 0), signal.SIGKILL)
        time.sleep(0.5)
        proxy.set("503")
        during_fault_phases = proxy.met["503"]
        time.sleep(4)  # the restart's reads meet the 503s (and retry)
        proxy.set("pass")
        run.wait_for(step=max(before) + 4, attempt=2)
        # Ray forwards the workers' lines to the driver's screen a little later (seen in
        # CI: over a second on the busy machine): the kill must not cut the restore lines.
        deadline = time.monotonic() + 30
        while len(RESTORED.findall(run.output())) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        run.kill_driver()
    finally:
        run.stop()
    out = run.output()
    restored = RESTORED.findall(out)
    assert sorted(restored) == [("0", "host memory"), ("1", "host memory")], restored
    assert proxy.met["503"] > during_fault_phases
    faults = ("pass", "503", "reset", "slow", "stall")  # the ones this test switched to
    assert all(proxy.met[m] > 0 for m in faults), proxy.met  # each fault met requests
    # A save whose parts were stored before the stall may still commit as the endpoint
    # comes back, so the resumed step is read from the run, then checked against it.
    found = re.search(r"resuming after step (\d+)", out)
    assert found, out[-3000:]
    resumed = int(found.group(1))
    assert resumed >= max(before)  # nothing committed before the stall was lost

    def attempt_of(step):
        return storage.read_json("checkpoints", f"step_{step:09d}", "manifest.json")["attempt"]

    assert max(s for s in committed_steps(storage) if attempt_of(s) == 1) == resumed
    damaged = 0
    for root, _, names in os.walk(s3.host_copies):
        for name in names:
            if name.startswith("ckpt.data"):
                with open(os.path.join(root, name), "r+b") as f:
                    f.truncate(7)
                damaged += 1
    assert damaged >= 1
    pace.unlink()
    again, rc, summary = _run_again(JobRun(url, "s3k", *args, env=env, logs=str(tmp_path)), proxy)
    assert rc == 0, again.output()[-3000:]
    # The log files are the run's: the rerun's lines follow the first run's.
    restored = re.findall(r"rank (\d) restored step \d+ from (.+) in", again.output())[2:]
    assert sorted(restored) == [("0", "storage"), ("1", "storage")], restored
    assert_same_result(summary, reference)
    assert summary["run_dir"] == f"{url}/s3k" and summary["checkpoint"].startswith("s3://")
    assert summary["attempts"] >= 3  # the rerun continued the run's attempts
    steps = committed_steps(storage)  # each whole, none marked bad (verify)
    assert steps[-1] == 160 and latest_intact(storage).step == 160
    assert all(attempt_of(s) >= 2 for s in steps if s > resumed)  # nothing partial kept
    kinds = [f["kind"] for f in storage.read_json("state.json")["failures"]]
    assert kinds == ["worker_died"], kinds  # no user error, no storage, no damage
    assert not os.path.exists(os.path.join(os.getcwd(), "s3:")), "nothing lands locally"
    assert_the_records_came_through_in_segments(storage, summary["attempts"])
    print(f"\nrequests met per mode: {dict(proxy.met)}; resumed after {resumed}, before {before}")


def _run_again(again: JobRun, proxy: FaultProxy) -> tuple[JobRun, int, dict | None]:
    """The job launched again on the run, to its end; the proxy stopped after it."""
    try:
        rc, summary = again.start().finish()
    finally:
        again.stop()
        proxy.stop()
    return again, rc, summary


def assert_the_records_came_through_in_segments(storage: Storage, attempts: int) -> None:
    """The run's event log and rank logs went up as segments, through the faults and two
    drivers: read back whole, no line twice (a retried upload replaces its segment), and
    ``raytf status`` and ``raytf logs`` read them from the bucket."""
    assert not storage.exists(RUN_LOG) and storage.listdir(segments.parts_dir(RUN_LOG))
    records = read_run_log(storage)
    reports = [(r["attempt"], r["rank"], r["step"]) for r in records if r["type"] == "report"]
    assert len(reports) == len(set(reports)), "a line uploaded twice"
    # The killed driver's last lines (under one upload interval: attempt 2's, here) were
    # in its spool only; the first attempt's and the rerun's are in the bucket.
    assert {1, attempts} <= {a for a, rank, _ in reports if rank == 0}
    assert max(step for _, _, step in reports) == 160
    ends = [r["state"] for r in records if r["type"] == "end"]
    assert ends == ["FINISHED"], ends  # the first driver was killed: no end of its own
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli(["status", storage.uri]) == 0
        assert cli(["logs", storage.uri, "--rank", "0"]) == 0
    text = out.getvalue()
    assert "FINISHED" in text
    headers = [int(a) for a in re.findall(r"--- attempt (\d+)", text)]
    assert headers == sorted(headers) and {1, attempts} <= set(headers), headers


def test_a_saved_model_checkpoint_comes_back_whole_from_the_loopback_s3(s3, tmp_path):
    """Ray Train's ``TensorflowCheckpoint.from_saved_model`` stored in the bucket and read
    back (``to_directory``, ``get_model``): its ``variables/`` subdirectory comes back
    byte for byte and the model serves what the original predicts."""
    import keras
    import numpy as np

    from raytf.integrations import ray_train

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.export(str(tmp_path / "exported"), verbose=False)
    made = ray_train.TensorflowCheckpoint.from_saved_model(str(tmp_path / "exported"))
    bucket = Storage(f"s3://{s3.make_bucket('raytf-saved-model')}/ckpt")
    bucket.upload_tree(made.path, "c")
    stored = ray_train.TensorflowCheckpoint(bucket.url("c"))
    copy = stored.to_directory(str(tmp_path / "copy"))
    originals = {
        os.path.relpath(os.path.join(root, n), made.path): os.path.join(root, n)
        for root, _, names in os.walk(made.path)
        for n in names
    }
    assert any(rel.startswith("variables" + os.sep) for rel in originals)
    for rel, path in originals.items():
        with open(path, "rb") as a, open(os.path.join(copy, rel), "rb") as b:
            assert a.read() == b.read(), rel
    x = np.arange(6, dtype="float32").reshape(2, 3)
    loaded = stored.get_model()  # held: its functions read the variables it owns
    served = loaded.serve(x).numpy()
    np.testing.assert_allclose(served, model.predict(x, verbose=0), rtol=1e-6)


def _manifest(storage: Storage, step: int) -> dict:
    return storage.read_json("checkpoints", f"step_{step:09d}", "manifest.json")


def _wait_commit(storage: Storage, run: JobRun, past: int, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while True:
        steps = [s for s in committed(storage) if s > past]
        if steps:
            return max(steps)
        assert run.proc.poll() is None and time.monotonic() < deadline, run.output()[-3000:]
        time.sleep(0.1)


# About 24 MB of checkpoint (a first layer 20,000 wide, Adam's slots with it).
BIG = ["--workers", "2", "--steps", "100", "--seed", "3", "--checkpoint-every", "20"]
BIG += ["--report-every", "4", "--width", "20000", "--step-sleep", "0.05"]
BIG += ["--max-failures", "3", "--keep", "20"]


def test_a_notice_and_a_sigterm_mid_upload_each_end_with_a_commit_in_time(
    s3, cluster_env, tmp_path
):
    """Checkpoints of about 24 MB going up at 3 MB/s (``fault_proxy``'s narrow link: an
    upload takes 8 s, its commit a manifest's PUT):

    1. a termination notice (SIGTERM to rank 1, as a spot reclaim sends it) while an
       interval save is uploading: the termination checkpoint is committed after it and
       the group restarts from it (a preemption, not a failure);
    2. SIGTERM to the driver (``ray job stop``) while the next interval save uploads:
       the run stops with a committed checkpoint within ``stop_checkpoint_wait_s``;
    3. the job launched again resumes from that checkpoint and finishes.
    The driver's commit never waits on the bytes: each manifest names the parts where
    they were uploaded (``at``); the test prints the size and each commit's time."""
    from raytf.settings import Settings

    bucket = s3.make_bucket("raytf-uploads")
    url = f"s3://{bucket}/runs"
    proxy = FaultProxy(s3.port).start()
    env = {**cluster_env, **s3.env, "FSSPEC_S3_ENDPOINT_URL": proxy.endpoint}
    run = JobRun(url, "up", *BIG, env=env, logs=str(tmp_path)).start()
    storage = Storage(f"{url}/up")  # the test's own view: straight to the server
    wait_s = Settings().stop_checkpoint_wait_s
    try:
        _wait_commit(storage, run, past=19)
        proxy.set("narrow")
        state = run.wait_for(step=42)
        assert 40 not in committed(storage), "the save at step 40 was not still going up"
        run.signal_worker(1, signal.SIGTERM, state)  # the notice
        term = _wait_commit(storage, run, past=40)
        assert _manifest(storage, term)["reason"] == "termination", _manifest(storage, term)
        state = run.wait_for(step=term + 2, attempt=2)
        assert f"resuming after step {term}" in run.output(), run.output()[-3000:]
        upload = (term // 20 + 1) * 20  # the next interval save
        state = run.wait_for(step=upload + 2, attempt=2)
        assert upload not in committed(storage), "the save was not still going up"
        t0 = time.monotonic()
        run.proc.send_signal(signal.SIGTERM)
        rc = run.proc.wait(timeout=wait_s + 60)
        stop_s = time.monotonic() - t0
    finally:
        run.stop()
    out = run.output()
    assert rc == 128 + signal.SIGTERM, out[-3000:]
    stopped = committed_steps(storage)[-1]
    assert stopped >= upload and storage.read_json("state.json")["state"] == "STOPPED"
    assert f"stopped on SIGTERM: checkpoint at step {stopped} committed" in out, out[-3000:]
    assert stop_s < wait_s, stop_s
    proxy.set("pass")
    again, rc, summary = _run_again(JobRun(url, "up", *BIG, env=env, logs=str(tmp_path)), proxy)
    assert rc == 0 and summary, again.output()[-3000:]
    assert f"resuming after step {stopped}" in again.output()
    assert summary["digests_agree"] and summary["attempts"] >= 3
    # The notice restarted the group as a preemption: no failure in the run's record.
    assert [f["kind"] for f in storage.read_json("state.json")["failures"]] == []
    manifest = _manifest(storage, stopped)
    assert set(manifest["at"]) == set(manifest["files"])  # named in place: nothing moved
    size_mb = sum(manifest["files"].values()) / 1e6
    commits = {r["step"]: r["commit_s"] for r in read_run_log(storage) if r["type"] == "checkpoint"}
    print(
        f"\ncheckpoint {size_mb:.1f} MB; commit s: termination {commits[term]:.3f}, "
        f"stop {commits[stopped]:.3f}, every commit {sorted(commits.items())}; "
        f"stopped {stop_s:.1f} s after SIGTERM"
    )
