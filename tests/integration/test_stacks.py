"""A process's stacks, running then stopped, read from outside it by a Ray task on its node."""

import os
import signal
import threading
import time

import pytest
import ray

from raytf.group.stacks import capture_stacks, excerpt
from raytf.messages import WorkerInfo

pytestmark = pytest.mark.integration


def waiting_in_a_distinctive_frame():
    time.sleep(600)


@ray.remote(num_cpus=0)
class Sleeper:
    def __init__(self):
        # Named like a worker's loop thread, so the excerpt picks it.
        threading.Thread(
            target=waiting_in_a_distinctive_frame, name="raytf-tf_0", daemon=True
        ).start()

    def where(self):
        ctx = ray.get_runtime_context()
        return os.getpid(), ctx.get_node_id(), ray.util.get_node_ip_address()


def test_stacks_of_a_running_then_stopped_process(ray_cluster):
    actor = Sleeper.remote()
    pid, node_id, ip = ray.get(actor.where.remote(), timeout=60)
    info = WorkerInfo(3, ip, node_id, "host", pid, 0, ())
    try:
        running = capture_stacks([info], timeout_s=10)[3]
        assert "waiting_in_a_distinctive_frame" in running, running
        assert "(libc.so.6)" in running  # --native: the C frames under the Python ones
        os.kill(pid, signal.SIGSTOP)
        began = time.monotonic()
        stacks = capture_stacks([info], timeout_s=10)
        took = time.monotonic() - began
    finally:
        os.kill(pid, signal.SIGCONT)
        ray.kill(actor)
    assert list(stacks) == [3]
    assert "waiting_in_a_distinctive_frame" in stacks[3], stacks[3]
    assert "stopped" in stacks[3]
    assert "waiting_in_a_distinctive_frame" in excerpt(stacks[3])
    # capture_stacks promises an answer within about its timeout_s (10 s here), a stopped
    # process included; the whole test measured 1.9 s (CI, 2 cores).
    assert took < 10, took
    print(f"captured in {took:.2f} s\n{stacks[3]}")
