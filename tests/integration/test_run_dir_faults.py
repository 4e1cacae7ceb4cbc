"""The run directory on a disk that fills mid-run: nothing committed may be lost or
altered. (A model changed between two launches of one name: test_recovery's driver
faults.)"""

import os
import subprocess
import time

import pytest

from raytf.checkpoint.layout import committed, verify
from raytf.rundir.storage import Storage

from .jobrun import FAULT_ARGS, JobRun

pytestmark = pytest.mark.slow


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
    """The run directory on a 64 MB tmpfs filled at step 10 of 160 for 10 s: the driver's
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
        run.wait_for(step=10)
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
