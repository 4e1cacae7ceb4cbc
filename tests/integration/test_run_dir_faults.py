"""The run directory under faults a user meets: a model changed between two launches of
one name, and a disk that fills mid-run. Nothing committed may be lost or altered."""

import hashlib
import os
import subprocess
import time

import pytest

import jobs.train_synthetic as train_synthetic
import raytf
from raytf.errors import CheckpointMismatchError
from raytf.rundir.checkpoints import CKPT_DIR, committed, verify
from raytf.rundir.storage import Storage

from .jobrun import FAULT_ARGS, JobRun

pytestmark = pytest.mark.slow


def tree_digest(path: str) -> dict[str, str]:
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = hashlib.sha256(f.read()).hexdigest()
    return out


def launch(storage: str, width: int, steps: int) -> raytf.Result:
    return raytf.Trainer(
        train_synthetic.train_loop,
        train_loop_config={"steps": steps, "batch_size": 64, "seed": 3, "report_every": 10,
                           "width": width},
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(
            name="changed", storage_path=storage, verbose=0,
            checkpoint_config=raytf.CheckpointConfig(checkpoint_every_steps=20, num_to_keep=5),
            failure_config=raytf.FailureConfig(max_failures=3),
        ),
    ).fit()  # fmt: skip


def test_a_changed_model_is_refused_and_the_original_resumes(ray_cluster, storage):
    """Dense(64) trained to step 40; the same name launched with Dense(32) stops at once,
    naming the variables that differ, with every file of the run as it was (before: each
    checkpoint marked bad in turn, and training from step 0); Dense(64) again resumes."""
    first = launch(storage, 64, 40)
    run_dir = first.path
    assert committed(Storage(run_dir)) == [20, 40]
    before = tree_digest(os.path.join(run_dir, CKPT_DIR))
    model_files = tree_digest(os.path.join(run_dir, "model"))
    assert sorted(before) and model_files

    t0 = time.monotonic()
    with pytest.raises(raytf.TrainingFailedError) as info:
        launch(storage, 32, 60)
    took = time.monotonic() - t0
    err = info.value.__cause__
    assert isinstance(err, CheckpointMismatchError), info.value
    assert err.step == 40 and err.run_dir == run_dir
    assert "this model (32, 32), the checkpoint (32, 64)" in str(err)  # the first kernel
    assert "start_fresh=True" in str(err)
    assert len(info.value.result.failures) == 1  # stopped at once: no retry, no fallback
    assert tree_digest(os.path.join(run_dir, CKPT_DIR)) == before  # nothing marked bad
    assert tree_digest(os.path.join(run_dir, "model")) == model_files

    again = launch(storage, 64, 60)
    assert [r["resumed_from"] for r in again.worker_results] == [40, 40]
    print(f"\nrefused in {took:.1f} s; the original model resumed from step 40")


def fill(path: str) -> int:
    """Write zeros until the filesystem is full; the bytes written."""
    written, block = 0, b"\0" * (1 << 20)
    with open(path, "wb") as f:
        try:
            while True:
                f.write(block)
                f.flush()
                written += len(block)
        except OSError:
            pass
    return written


def test_a_disk_full_for_ten_seconds_costs_checkpoints_not_the_run(
    reference, cluster_env, tmp_path
):
    """The run directory on a 64 MB tmpfs filled at step 30 of 160 for 10 s: the driver's
    state and commits wait it out (before: the job exited 1 on the driver's state.json
    write), the saves that could not be written are skipped and said so, and the run
    ends with the weights of an uninterrupted one, every commit whole."""
    if os.geteuid() != 0:
        pytest.skip("needs root: mounts a small tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], check=True)
    pace = tmp_path / "pace"
    pace.touch()
    args = [*FAULT_ARGS, "--keep", "20", "--step-sleep", "0.2", "--slow-while", str(pace)]
    run = JobRun(str(disk), "full", *args, env=cluster_env, logs=str(tmp_path))
    try:
        run.start()
        run.wait_for(step=30)
        filler = disk / "filler"
        full_for = time.monotonic()
        assert fill(str(filler)) > 0
        time.sleep(10)
        filler.unlink()
        full_for = time.monotonic() - full_for
        pace.unlink()
        rc, summary = run.finish()
        out = run.output()
        state = run.state()
        steps = committed(Storage(run.run_dir))
        intact = [verify(Storage(run.run_dir), s) for s in steps]
    finally:
        run.stop()
        subprocess.run(["umount", "-l", str(disk)], check=False)
    assert rc == 0, out[-3000:]
    assert summary["attempts"] == 1 and summary["failures"] == []
    assert summary["weights_digest"] == reference["weights_digest"] and summary["digests_agree"]
    assert "cannot write the run directory" in out and "writable again" in out, out[-3000:]
    assert state["state"] == "FINISHED" and state["last_step"] == 160
    assert steps and steps[-1] == 160 and all(m is not None for m in intact), steps
    skipped = [s for s in range(20, 161, 20) if s not in steps]  # saves met the full disk
    assert skipped and max(steps) > max(skipped), steps  # and commits came back after it
    print(f"\ndisk full for {full_for:.1f} s; committed {steps}")
