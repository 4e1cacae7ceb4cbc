"""Run the example job as a user would (its own driver process) and inject faults from
outside: signals to the pids that ``raytf status`` reports, or to the driver itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from raytf.rundir.storage import Storage, join_run_dir
from raytf.tools.local.cluster import SIMULATED_HEALTH_CHECK, LocalCluster, LocalNode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(ROOT, "jobs", "train_synthetic.py")
KERAS_JOB = os.path.join(ROOT, "jobs", "train_keras.py")

# Small but long enough to hit mid-run: 160 steps of ~35 ms, a checkpoint every 20.
REFERENCE_ARGS = ["--workers", "2", "--steps", "160", "--seed", "3", "--checkpoint-every", "20"]
REFERENCE_ARGS += ["--report-every", "4"]
# The pause after each step gives a test time to hit mid-run; the uninterrupted reference
# has no fault to wait for, and a pause changes no number (each batch is a function of
# its step), so it runs without.
FAULT_ARGS = [*REFERENCE_ARGS, "--step-sleep", "0.03"]


def three_nodes() -> LocalCluster:
    """A head that runs no workers and three 1-CPU nodes: one worker per node."""
    return LocalCluster(
        num_nodes=3, cpus_per_node=1, head_cpus=0, system_config=SIMULATED_HEALTH_CHECK
    )


def node_of(cluster: LocalCluster, state: dict, rank: int) -> LocalNode:
    """The node the given rank runs on, as ``raytf status`` reports it."""
    ip = next(w["node_ip"] for w in state["workers"] if w["rank"] == rank)
    return next(n for n in cluster.nodes if n.ip == ip)


class JobRun:
    def __init__(
        self,
        storage: str,
        name: str,
        *args: str,
        env: dict | None = None,
        job: str = JOB,
        logs: str | None = None,
    ):
        """``storage`` may be a URL (s3://...); the job's output then goes to ``logs``."""
        self.run_dir = join_run_dir(storage, name)
        self.cmd = [sys.executable, job, "--storage", storage, "--name", name, *args]
        self.env = dict(os.environ, **(env or {}))
        self.out_path = os.path.join(logs or storage, f"{name}.out")
        self.err_path = os.path.join(logs or storage, f"{name}.err")
        self.proc: subprocess.Popen | None = None

    def start(self) -> JobRun:
        with open(self.out_path, "ab") as out, open(self.err_path, "ab") as err:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=err, env=self.env)
        return self

    def state(self) -> dict:
        """What `raytf status RUN_DIR --json` prints (the contract for scripts)."""
        proc = subprocess.run(
            [sys.executable, "-m", "raytf.tools.cli", "status", self.run_dir, "--json"],
            capture_output=True,
            text=True,
        )
        return json.loads(proc.stdout) if proc.returncode == 0 else {}

    def wait_for(self, *, step: int, attempt: int = 1, timeout: float = 180) -> dict:
        """Block until the given attempt has passed ``step``; return the state."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.output()[-3000:]
            try:
                st = Storage(self.run_dir).read_json("state.json")
            except (OSError, ValueError):
                st = {}
            if st.get("attempt", 0) >= attempt and (st.get("last_step") or 0) >= step:
                if st.get("state") == "RUNNING":
                    return st
            time.sleep(0.1)
        raise TimeoutError(f"attempt {attempt} never passed step {step}: {self.output()[-3000:]}")

    def signal_worker(self, rank: int, sig: int, state: dict) -> int:
        pid = next(w["pid"] for w in state["workers"] if w["rank"] == rank)
        os.kill(pid, sig)
        return pid

    def finish_after_killing(self, rank: int, *, step: int) -> tuple[int, dict | None]:
        """Start, SIGKILL ``rank`` once the run passed ``step``, and finish (or stop)."""
        self.start()
        try:
            self.signal_worker(rank, signal.SIGKILL, self.wait_for(step=step))
            return self.finish()
        finally:
            self.stop()

    def kill_driver(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def finish(self, timeout: float = 300) -> tuple[int, dict | None]:
        assert self.proc is not None
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        lines = [ln for ln in open(self.out_path).read().splitlines() if ln.startswith("{")]
        return rc, (json.loads(lines[-1]) if lines else None)

    def output(self) -> str:
        text = ""
        for path in (self.out_path, self.err_path):
            if os.path.exists(path):
                text += open(path, errors="replace").read()
        return text

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
