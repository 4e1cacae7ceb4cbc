"""A multi-node Ray cluster on one machine, made of real ``ray start`` nodes.

Each node is its own ``ray start --block`` process in its own process session,
on its own loopback address (127.0.0.2, .3, ...) with its own ports, so nodes
are told apart by IP as on a real cluster, nothing listens beyond this host,
and ``stop``/``kill_node`` end exactly the processes this object started (the
node's session), never anyone else's Ray. ``num_gpus`` declares GPUs as Ray
resources, so GPU scheduling and device selection run on a CPU-only machine.

Ray rewrites 127.0.0.1 to the host's network address; other loopback
addresses are kept as given, hence 127.0.0.2 and up.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from raytf.settings import Settings
from raytf.tools.local.processes import pid_alive, wait_settled

READY_MARKER = "Ray runtime started"
WORKER_PORT_BASE = 20000
WORKER_PORTS_PER_NODE = 400  # up to 32 nodes below 32768


def free_ports(count: int, taken: set[int]) -> list[int]:
    """``count`` distinct ports, none in ``taken``, free on every local address.

    Every socket stays bound until all are picked: one bound and closed at a time,
    the kernel may hand the same port out twice (seen: a node's object manager and
    dashboard agent given one port, and its ``ray start`` refused). Bound on the
    wildcard address, so a port another node holds on 127.0.0.1 only (Ray's dashboard
    agent listens there too) is not picked."""
    picked: list[int] = []
    held: list[socket.socket] = []
    try:
        while len(picked) < count:
            if len(held) > count + 1000:
                raise RuntimeError(f"found only {len(picked)} of {count} free ports")
            sock = socket.socket()
            held.append(sock)
            sock.bind(("", 0))
            port = sock.getsockname()[1]
            if port not in taken:
                picked.append(port)
    finally:
        for sock in held:
            sock.close()
    return picked


def _ray_executable() -> str:
    candidate = os.path.join(os.path.dirname(sys.executable), "ray")
    return candidate if os.path.exists(candidate) else "ray"


# What `ray start` prints when its node could not register with the GCS in time.
STARTUP_TIMED_OUT = "timed out during startup"


class _RegistrationTimeout(RuntimeError):
    """`ray start` gave up waiting for the GCS: a loaded machine, worth one more try."""


# Ray's defaults find a dead node after about 15 s (3 s x 5 missed checks). A simulated
# node is killed to watch the recovery, so `raytf local` finds it in about 3 s.
SIMULATED_HEALTH_CHECK = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}


def ensure_auth_token() -> None:
    """Make this user's Ray token (``~/.ray/auth_token``) if there is none yet.

    ``ray start`` with token authentication refuses to create one (``ray.init`` does),
    so on a fresh machine the first ``raytf local up`` failed with "Token authentication
    is enabled but no authentication token was found" (CI's first cluster test did).
    Ray's own CLI makes it, once; the token never reaches this process's output.
    """
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return  # the user says where the token is
    if os.path.exists(os.path.join(os.path.expanduser("~"), ".ray", "auth_token")):
        return
    done = subprocess.run(
        [_ray_executable(), "get-auth-token", "--generate"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    if done.returncode:
        raise RuntimeError(f"ray get-auth-token --generate failed: {done.stderr[-2000:]}")


@dataclass
class LocalNode:
    """One ``ray start --block`` process, the leader of its own session (pgid == pid)."""

    index: int
    ip: str
    pid: int
    log_path: str
    resources: dict = field(default_factory=dict)
    proc: subprocess.Popen | None = None  # None for a node started by another process

    @property
    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return pid_alive(self.pid)

    def signal(self, sig: int) -> None:
        """Signal every process of this node (its session), not just ``ray start``."""
        if self.proc is None and not self._still_ours():
            return
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def _still_ours(self) -> bool:
        """A pid read from a state file may since belong to someone else: check its command."""
        try:
            with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            return True  # gone, or no /proc: killpg then finds nothing or only stragglers
        return "start" in argv and f"--node-ip-address={self.ip}" in argv

    def wait(self, timeout: float) -> bool:
        """Wait for ``ray start`` to exit; True if it did."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while self.alive:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "ip": self.ip,
            "pid": self.pid,
            "log_path": self.log_path,
            "resources": self.resources,
        }


class LocalCluster:
    """Head node plus ``num_nodes`` worker nodes; use as a context manager."""

    def __init__(
        self,
        num_nodes: int = 0,
        *,
        cpus_per_node: int = 2,
        gpus_per_node: int = 0,
        head_cpus: int | None = None,
        head_gpus: int = 0,
        temp_dir: str | None = None,
        auth_mode: str = "token",
        system_config: dict | None = None,
        autoscaling_config: dict | None = None,
    ):
        self.num_nodes = num_nodes
        self.cpus_per_node = cpus_per_node
        self.gpus_per_node = gpus_per_node
        self.head_cpus = cpus_per_node if head_cpus is None else head_cpus
        self.head_gpus = head_gpus
        self._own_temp = temp_dir is None
        self.temp_dir = temp_dir or tempfile.mkdtemp(prefix="rtl-", dir="/tmp")
        self.auth_mode = auth_mode
        self.system_config = system_config
        # A fake_multinode autoscaling config: the head's autoscaler then adds and removes
        # nodes as local processes (Ray's fake provider), inside the head's process session.
        self.autoscaling_config = autoscaling_config
        self.autoscaling_config_path: str | None = None
        self.nodes: list[LocalNode] = []
        self.port = 0
        self.dashboard_port = 0
        self._ports_given: set[int] = set()  # to this cluster's nodes: never twice

    # -- addresses and environment ----------------------------------------
    @property
    def address(self) -> str:
        return f"127.0.0.2:{self.port}"

    @property
    def dashboard_url(self) -> str:
        """Where ``ray job submit --address`` goes."""
        return f"http://127.0.0.2:{self.dashboard_port}"

    def client_env(self) -> dict[str, str]:
        """Environment a client process needs to join (``ray job submit``, a driver)."""
        return {"RAY_ADDRESS": self.address, "RAY_AUTH_MODE": self.auth_mode}

    # -- lifecycle ----------------------------------------------------------
    def start(self) -> str:
        try:
            self.port, self.dashboard_port = self._free_ports(2)
            if self.auth_mode == "token":
                ensure_auth_token()
            self._start_node(head=True, cpus=self.head_cpus, gpus=self.head_gpus)
            for _ in range(self.num_nodes):
                self.add_node()
        except BaseException:
            self.stop()  # never leave half a cluster running
            raise
        return self.address

    def add_node(
        self, cpus: int | None = None, gpus: int | None = None, wrap: list[str] | None = None
    ) -> LocalNode:
        """One more node; ``wrap`` is a command its ``ray start`` runs under (a test gives
        a node its own mount namespace with it, so the node sees other files)."""
        return self._start_node(
            head=False,
            cpus=self.cpus_per_node if cpus is None else cpus,
            gpus=self.gpus_per_node if gpus is None else gpus,
            wrap=wrap,
        )

    def _start_node(self, *, head: bool, cpus: int, gpus: int, wrap=None) -> LocalNode:
        """Start one node; a joining node whose ``ray start`` timed out registering with
        a busy GCS (Ray's "timed out during startup") is started once more, on new ports."""
        for attempt in (1, 2):
            try:
                return self._start_node_once(head=head, cpus=cpus, gpus=gpus, wrap=wrap)
            except _RegistrationTimeout:
                node = self.nodes.pop()
                node.signal(signal.SIGKILL)  # whatever of it still runs
                node.wait(10)
                if head or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _free_ports(self, count: int) -> list[int]:
        ports = free_ports(count, self._ports_given)
        self._ports_given.update(ports)
        return ports

    def _start_node_once(self, *, head: bool, cpus: int, gpus: int, wrap=None) -> LocalNode:
        index = len(self.nodes)
        ip = f"127.0.0.{2 + index}"
        names = ["node-manager", "object-manager", "dashboard-agent-listen"]
        names += ["dashboard-agent-grpc", "metrics-export", "runtime-env-agent"]
        names += ["ray-client-server"] if head else []
        ports = dict(zip([f"--{n}-port" for n in names], self._free_ports(len(names))))
        # Worker ports below Linux's ephemeral range (32768+), where free_ports' picks land.
        lo = WORKER_PORT_BASE + WORKER_PORTS_PER_NODE * index
        cmd = [
            *(wrap or []),
            _ray_executable(),
            "start",
            "--block",
            f"--node-ip-address={ip}",
            f"--num-cpus={cpus}",
            f"--num-gpus={gpus}",
            f"--min-worker-port={lo}",
            f"--max-worker-port={lo + WORKER_PORTS_PER_NODE - 1}",
            *[f"{k}={v}" for k, v in ports.items()],
        ]
        if head:
            cmd += [
                "--head",
                f"--port={self.port}",
                f"--temp-dir={self.temp_dir}",
                "--dashboard-host=127.0.0.2",
                f"--dashboard-port={self.dashboard_port}",
            ]
            if self.system_config:
                cmd.append(f"--system-config={json.dumps(self.system_config)}")
            if self.autoscaling_config is not None:
                cmd.append(f"--autoscaling-config={self._write_autoscaling_config()}")
        else:
            cmd += [f"--address={self.address}"]
        env = dict(os.environ, RAY_AUTH_MODE=self.auth_mode)
        env.pop("RAY_ADDRESS", None)
        if head and self.autoscaling_config is not None:
            env["RAY_FAKE_CLUSTER"] = "1"  # Ray's fake provider refuses to run without it
        log_path = os.path.join(self.temp_dir, f"node-{index}.log")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        node = LocalNode(index, ip, proc.pid, log_path, {"CPU": cpus, "GPU": gpus}, proc)
        self.nodes.append(node)
        self._wait_ready(node)
        return node

    def _write_autoscaling_config(self) -> str:
        import yaml

        config = json.loads(json.dumps(self.autoscaling_config))
        # The fake provider's nodes join this head, not the default 127.0.0.1:6379.
        config.setdefault("provider", {})["gcs_address"] = self.address
        path = os.path.join(self.temp_dir, "autoscaling.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        self.autoscaling_config_path = path
        return path

    def _wait_ready(self, node: LocalNode) -> None:
        timeout_s = Settings.from_env().node_start_timeout_s
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(node.log_path, errors="replace") as f:
                text = f.read()
            if READY_MARKER in text:
                return
            if not node.alive:
                error = _RegistrationTimeout if STARTUP_TIMED_OUT in text else RuntimeError
                raise error(f"ray start for node {node.index} exited:\n{text[-3000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"node {node.index} did not start in {timeout_s:.0f} s")

    def kill_node(self, index: int, sig: int = signal.SIGKILL) -> None:
        """End one node abruptly, as a lost machine would (SIGKILL by default)."""
        node = self.nodes[index]
        node.signal(sig)
        if not node.wait(30):
            node.signal(signal.SIGKILL)
            node.wait(30)

    def stop(self) -> None:
        """Stop worker nodes first, then the head: SIGTERM to every node's processes,
        SIGKILL to what still runs once they stop exiting (``processes.wait_settled``:
        ``ray start --block``, the GCS and the raylet never exit on SIGTERM)."""
        for node in reversed(self.nodes):
            if node.alive:
                node.signal(signal.SIGTERM)
        wait_settled({node.pid for node in self.nodes}, limit_s=5)
        for node in reversed(self.nodes):
            node.signal(signal.SIGKILL)  # stragglers in the session (workers, agents)
            node.wait(10)
        if self._own_temp:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    # -- a cluster that outlives the process that started it (``raytf local``) ----------
    def to_dict(self) -> dict:
        return {
            "port": self.port,
            "dashboard_port": self.dashboard_port,
            "temp_dir": self.temp_dir,
            "auth_mode": self.auth_mode,
            "nodes": [n.to_dict() for n in self.nodes],
        }

    @classmethod
    def from_dict(cls, doc: dict) -> LocalCluster:
        """The cluster another process started and described with ``to_dict``."""
        cluster = cls(temp_dir=doc["temp_dir"], auth_mode=doc["auth_mode"])
        cluster._own_temp = True  # whoever stops it cleans up after it
        cluster.port, cluster.dashboard_port = doc["port"], doc["dashboard_port"]
        cluster.nodes = [LocalNode(**n) for n in doc["nodes"]]
        cluster.num_nodes = len(cluster.nodes) - 1
        return cluster

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
