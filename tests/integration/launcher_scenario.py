"""The launcher scenario of ``test_launcher.py``, run inside namespaces of its own.

``test_launcher.py`` runs this script under ``unshare --pid --fork --mount-proc --net``:
Ray's launcher runs ``ray stop`` on every node it manages, and ``ray stop`` ends every
Ray process it can see, so the scenario must see no one else's. There, under a ``bash``
that is the namespace's init (it reaps the orphans ``ray start`` leaves), it

- brings ``lo`` up in the fresh network namespace (nothing else listens there, so the
  shipped ports 22, 6379 and 8265 are free) and mounts a private ``/tmp`` and ``/run``
  (the local provider's state, the launcher's SSH control sockets and config cache,
  the nodes' homes, the "shared storage" and sshd's run dir vanish with the namespace);
- starts one ``sshd`` per machine, each on its own loopback address, in a PID and mount
  namespace of its own with its own home directory (a copy of ``/etc/passwd`` naming
  it) and its own ``/tmp/ray``: like separate machines, each node's ``ray stop`` sees
  only its own processes, and what one node writes to ``~`` the others do not see;
- writes a cluster YAML derived from ``cluster_configs/onprem.yaml`` and runs the
  commands a user runs (``ray up``, ``ray submit``, ``ray exec``, ``ray down``);
- prints one JSON object: every command's exit status, output tail and timing.

Usage: ``python launcher_scenario.py REPO_ROOT`` (REPO_ROOT holds ``cluster_configs``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import yaml

HEAD = "127.0.0.10"
WORKERS = ["127.0.0.11", "127.0.0.12"]
WORK = "/tmp/launcher"  # on this namespace's private /tmp
SHARED = f"{WORK}/shared"  # every node sees it at the same path, as it would an NFS mount
VENV_BIN = os.path.dirname(os.path.abspath(sys.executable))
JOB_ARGS = ["--workers", "2", "--use-gpu", "--steps", "40", "--checkpoint-every", "20"]
JOB_ARGS += ["--max-failures", "1", "--storage", SHARED]
SSH = ["ssh", "-i", f"{WORK}/user_key", "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes"]
SSH += ["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]


def sh(cmd: str) -> None:
    subprocess.run(cmd, shell=True, check=True)


def setup_namespace(root: str) -> None:
    sh("ip link set lo up")
    # A checkout (and its venv) under /tmp, as a CI clone may be, must stay visible once
    # /tmp is replaced: held open by a descriptor, bound back at the same path after.
    needed = {os.path.realpath(p) for p in (root, sys.prefix)}
    under = sorted(p for p in needed if p.startswith("/tmp/"))
    kept = [(p, os.open(p, os.O_RDONLY | os.O_DIRECTORY)) for p in under]
    sh("mount -t tmpfs -o mode=1777 tmpfs /tmp")
    for path, fd in kept:
        os.makedirs(path, exist_ok=True)
        subprocess.run(
            ["mount", "--no-canonicalize", "--bind", f"/proc/{os.getpid()}/fd/{fd}", path],
            check=True,
            pass_fds=(fd,),
        )
        os.close(fd)
    os.makedirs(SHARED)
    sh("mount -t tmpfs -o mode=0755 tmpfs /run")  # for sshd's privilege-separation dir
    os.makedirs("/run/sshd", mode=0o755)
    sh(f"ssh-keygen -q -t ed25519 -N '' -f {WORK}/host_key")
    sh(f"ssh-keygen -q -t ed25519 -N '' -f {WORK}/user_key")


def start_machine(ip: str, index: int) -> subprocess.Popen:
    """One "machine": an sshd on ``ip``, its own PID and mount namespace, its own home."""
    node = f"{WORK}/nodes/{ip}"
    home = f"{node}/home"
    os.makedirs(f"{home}/.ssh", mode=0o700)
    with open(f"{WORK}/user_key.pub") as src, open(f"{home}/.ssh/authorized_keys", "w") as dst:
        dst.write(src.read())
    # What differs between machines that, on one host, must differ by hand: the node's
    # address (Ray would otherwise pick 127.0.0.1 for every node) and the dashboard
    # agent's port (it also binds 127.0.0.1, where the shipped default 52365 would clash).
    with open(f"{home}/.bashrc", "w") as f:
        f.write(f"export NODE_IP={ip} AGENT_PORT={52365 + index}\n")
    with open("/etc/passwd") as f:
        lines = f.read().splitlines()
    with open(f"{node}/passwd", "w") as f:
        for line in lines:
            fields = line.split(":")
            if fields[0] == "root":
                fields[5], fields[6] = home, "/bin/bash"
            f.write(":".join(fields) + "\n")
    with open(f"{node}/sshd_config", "w") as f:
        f.write(
            f"ListenAddress {ip}:22\nHostKey {WORK}/host_key\nPidFile {node}/sshd.pid\n"
            "PermitRootLogin prohibit-password\nPubkeyAuthentication yes\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "StrictModes no\nAuthorizedKeysFile .ssh/authorized_keys\nMaxStartups 100\n"
            "MaxSessions 100\nLogLevel ERROR\n"
        )
    os.makedirs("/tmp/ray", exist_ok=True)
    inner = (
        f"mount --bind {node}/passwd /etc/passwd && mount -t tmpfs tmpfs /tmp/ray && "
        f"/usr/sbin/sshd -D -e -f {node}/sshd_config; exit $?"
    )
    log = open(f"{node}/sshd.log", "wb")
    cmd = ["unshare", "--pid", "--kill-child", "--mount-proc", "bash", "-c", inner]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def wait_for_ssh(ip: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = subprocess.run([*SSH, f"root@{ip}", "true"], capture_output=True)
        if probe.returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"sshd on {ip} did not answer")


def cluster_yaml(root: str) -> str:
    """``cluster_configs/onprem.yaml`` with this host's addresses, key and environment."""
    with open(os.path.join(root, "cluster_configs", "onprem.yaml")) as f:
        config = yaml.safe_load(f)
    config["cluster_name"] = f"raytf-launcher-test-{os.getpid()}-{int(time.time())}"
    config["provider"].update(head_ip=HEAD, worker_ips=WORKERS)
    config["auth"] = {"ssh_user": "root", "ssh_private_key": f"{WORK}/user_key"}
    # The already-built virtual environment instead of a pip install from the network;
    # raytf itself comes from the copy file_mounts synced to the node, as it would.
    setup = f'echo "export PATH={VENV_BIN}:\\$PATH PYTHONPATH=\\$HOME/raytf" >> ~/.bashrc'
    config["head_setup_commands"] = [setup]
    config["worker_setup_commands"] = [setup]
    extra = " --node-ip-address=$NODE_IP --dashboard-agent-listen-port=$AGENT_PORT"
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        config[key] = [c + extra if "ray start" in c else c for c in config[key]]
    path = f"{WORK}/cluster.yaml"
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path


def run(cmd: list[str], env: dict, cwd: str, timeout: float, watch: str | None = None) -> dict:
    """Run a command, keeping its output; ``watch``: also time the first line starting so."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines, seen_at = [], None
    deadline = t0 + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if watch and seen_at is None and line.startswith(watch):
            seen_at = time.monotonic() - t0
        if time.monotonic() > deadline:
            proc.kill()
            break
    rc = proc.wait()
    return {
        "cmd": " ".join(cmd),
        "rc": rc,
        "s": round(time.monotonic() - t0, 2),
        "first_match_s": None if seen_at is None else round(seen_at, 2),
        "lines": lines,
    }


def wait_for_nodes(count: int, timeout: float) -> float:
    """Seconds until ``count`` nodes are alive, as the head's dashboard (127.0.0.1) says."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            with urllib.request.urlopen("http://127.0.0.1:8265/nodes?view=summary", timeout=5) as r:
                nodes = json.load(r)["data"]["summary"]
            if sum(n.get("raylet", {}).get("state") == "ALIVE" for n in nodes) >= count:
                return time.monotonic() - t0
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"fewer than {count} nodes alive after {timeout:.0f} s")


def ray_processes() -> list[str]:
    """Ray daemons still running on any of the machines (this namespace sees them all)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if name in ("raylet", "gcs_server"):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
            ip = next((a.split("=", 1)[1] for a in args if "node_ip_address=" in a), "?")
            found.append(f"{name} pid {pid} on {ip}")
    return sorted(found)


def tail(result: dict, n: int = 60) -> dict:
    return dict(result, lines=result["lines"][-n:])


def main(root: str) -> dict:
    setup_namespace(root)
    machines = [start_machine(ip, i) for i, ip in enumerate([HEAD, *WORKERS])]
    out: dict = {"timings": {}}
    for ip in [HEAD, *WORKERS]:
        wait_for_ssh(ip)
    config = cluster_yaml(root)
    home = f"{WORK}/launcher_home"
    os.makedirs(home)
    env = {
        "PATH": f"{VENV_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": home,
        "TMPDIR": f"{WORK}/launcher_tmp",
        "LANG": "C.UTF-8",
    }
    os.makedirs(env["TMPDIR"])
    ray = os.path.join(VENV_BIN, "ray")
    try:
        up = run([ray, "up", "-y", "--no-config-cache", config], env, root, 240)
        out["up"] = tail(up)
        out["timings"]["ray_up_s"] = up["s"]
        if up["rc"]:
            return out
        out["timings"]["workers_joined_after_up_s"] = round(wait_for_nodes(3, 60), 2)
        out["timings"]["ray_up_to_ready_s"] = round(
            up["s"] + out["timings"]["workers_joined_after_up_s"], 2
        )
        job = ["jobs/train_synthetic.py", "--", *JOB_ARGS, "--name", "submitted"]
        submit = run([ray, "submit", config, *job], env, root, 240, watch="{")
        out["submit"] = tail(submit)
        out["timings"]["ray_submit_s"] = submit["s"]
        out["timings"]["ray_submit_to_last_line_s"] = submit["first_match_s"]
        show = f"raytf status {SHARED}/submitted --json"
        status = run([ray, "exec", config, show], env, root, 60)
        out["status"] = tail(status, 400)
    except Exception as exc:  # noqa: BLE001 - reported to the test with the head's logs
        out["error"] = repr(exc)
        logs = "grep -hEv 'min count|Adding 1' /tmp/ray/session_latest/logs/monitor.log"
        out["head_logs"] = tail(run([ray, "exec", config, logs], env, root, 60), 100)
    finally:
        down = run([ray, "down", "-y", config], env, root, 120)
        out["down"] = tail(down)
        out["timings"]["ray_down_s"] = down["s"]
        # `ray down` of the local provider runs `ray stop` on the head only: the workers'
        # Ray would linger until it gave up on the head, so a user stops it on each worker.
        out["ray_processes_after_down"] = ray_processes()
        for ip in WORKERS:
            stop = [*SSH, f"root@{ip}", f"{VENV_BIN}/ray stop"]
            out[f"stop_{ip}"] = tail(run(stop, env, root, 60))
        out["ray_processes_after_stop"] = ray_processes()
        state = f"/tmp/ray/cluster-{yaml.safe_load(open(config))['cluster_name']}.state"
        if os.path.exists(state):  # the local provider's record of the launcher's cluster
            os.remove(state)
        out["state_file_left"] = os.path.exists(state)
        for machine in machines:
            machine.kill()  # --kill-child: the machine's namespace goes with it
            machine.wait()
    return out


if __name__ == "__main__":
    result = main(sys.argv[1])
    print(json.dumps(result), flush=True)
