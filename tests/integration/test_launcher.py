"""``ray up``, ``ray submit``, ``ray exec`` and ``ray down`` of ``cluster_configs/onprem.yaml``,
run as a user runs them: Ray's ``local`` provider over SSH to three "machines" on loopback.

Why a namespace of its own: Ray's launcher runs ``ray stop`` on every node it manages,
and ``ray stop`` ends every Ray process it can see, other tests' clusters and other
sessions' included. So the whole scenario (``launcher_scenario.py``) runs under
``unshare --pid --fork --mount-proc --net``: it sees only its own processes, its ports
cannot clash with anyone's (a fresh network namespace, only ``lo``), its files go to a
private ``/tmp``, and everything it started dies with the namespace's init. Inside, each
machine is an ``sshd`` in a PID and mount namespace of its own, so one node's ``ray stop``
does not end the others' Ray either.

Needs root, ``unshare``, ``ip``, ``sshd``, ``ssh`` and ``rsync`` (``.ci/run`` installs
openssh-server and rsync); without them the test is skipped and says what is missing.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from .jobrun import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCENARIO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher_scenario.py")
TOOLS = ["unshare", "ip", "mount", "sshd", "ssh", "ssh-keygen", "rsync"]
SBIN = "/usr/local/sbin:/usr/sbin:/sbin"


def missing_prerequisites() -> str | None:
    if os.geteuid() != 0:
        return "needs root (unshare of PID and network namespaces, sshd with root login)"
    path = f"{os.environ.get('PATH', '')}:{SBIN}"
    missing = [t for t in TOOLS if shutil.which(t, path=path) is None]
    if missing:
        return f"missing {', '.join(missing)} (apt-get install openssh-server rsync iproute2)"
    # What the scenario does first, in a namespace of its own (the mount stays there).
    probe = ["unshare", "--pid", "--fork", "--mount-proc", "--net", "sh", "-c"]
    probe += ["ip link set lo up && mount -t tmpfs tmpfs /tmp"]
    done = subprocess.run(probe, capture_output=True, env=dict(os.environ, PATH=path))
    if done.returncode:
        return f"PID/mount/network namespaces refused here: {done.stderr.decode()[-300:]}"
    return None


@pytest.mark.timeout(240)  # 75-110 s measured on 2 busy cores
def test_ray_up_submit_exec_down_on_prem(capsys):
    reason = missing_prerequisites()
    if reason:
        pytest.skip(reason)
    cmd = ["unshare", "--pid", "--kill-child", "--mount-proc", "--net", "bash", "-c"]
    # bash as the namespace's init reaps the orphans `ray start` leaves (its daemons).
    cmd += [f'"{sys.executable}" "{SCENARIO}" "{ROOT}"; exit $?']
    env = dict(os.environ, PATH=f"{os.environ.get('PATH', '')}:{SBIN}")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=230, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])

    def lines(step: str) -> str:
        return "\n".join(out.get(step, {}).get("lines", []))[-4000:]

    assert "error" not in out, f"{out['error']}\n{lines('head_logs')}\n{lines('submit')}"
    with capsys.disabled():
        print(f"\nlauncher timings: {json.dumps(out['timings'])}")
        print(f"left by ray down: {out['ray_processes_after_down']}")
    assert out["up"]["rc"] == 0, lines("up")
    assert out["submit"]["rc"] == 0, lines("submit")
    summaries = [ln for ln in out["submit"]["lines"] if ln.startswith("{")]
    assert summaries, lines("submit")
    summary = json.loads(summaries[-1])
    assert summary["steps"] == 40 and summary["attempts"] == 1 and summary["digests_agree"]

    assert out["status"]["rc"] == 0, lines("status")
    text = "\n".join(out["status"]["lines"])
    state = json.loads(text[text.index("{") : text.rindex("}") + 1])
    assert {w["node_ip"] for w in state["workers"]} == {"127.0.0.11", "127.0.0.12"}
    assert all(w["gpu_ids"] for w in state["workers"]), state["workers"]  # the fake GPUs
    assert state["checkpoints"][-1] == 40, state["checkpoints"]

    assert out["down"]["rc"] == 0, lines("down")
    # What `ray down` leaves: the workers' Ray (the local provider stops the head's only).
    assert all("127.0.0.10" not in p for p in out["ray_processes_after_down"])
    assert out["ray_processes_after_stop"] == [], out["ray_processes_after_stop"]
    assert not out["state_file_left"]
