"""Can each node's workers reach the run's object store with the credentials they will
have? Asked on every node a worker lands on, before its first step.

The driver's storage check at launch runs with the driver's credentials. A worker
runs with its node's (an instance profile, a service account, ``~/.aws``) and the
variables the driver forwards (its credentials only with ``forward_credentials``).
Ray's cloud launchers give their profile to the head only, so a cluster whose
worker pools have none passed the launch check and failed at each worker's first
upload, after the whole group had started. So at every attempt, each node not
checked before runs a zero-CPU task that writes, reads back and deletes a small
object in the run directory with the workers' environment, and says which of the
three failed and why. A node that cannot is named in a ``ConfigError`` (its
credentials are the user's to fix); a node where the task could not run (it died,
or is still installing the job's environment) costs the attempt
(``WorkerSetupError``, retried) and is asked again.

The task is made inside a function, so Ray sends it by value: it needs fsspec and
the store's own package on the node (what the workers need too), not raytf. The
workers' variables are put in its process's environment for the check only.
"""

from __future__ import annotations

import uuid

import ray

from raytf.errors import ConfigError, WorkerSetupError
from raytf.group.cluster import alive_nodes


def _probe():
    def probe_access(url: str, token: str, env: dict) -> tuple[str, str | None]:
        import os
        import socket

        import fsspec

        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        doing = "open the store"
        try:
            protocol = fsspec.core.split_protocol(url)[0] or "file"
            conf: dict = {}
            fsspec.config.set_conf_env(conf, envdict=os.environ)  # FSSPEC_<PROTOCOL>_*
            options = {**conf.get(protocol, {}), "skip_instance_cache": True}
            fs = fsspec.filesystem(protocol, **options)
            path = f"{fs._strip_protocol(url).rstrip('/')}/.raytf-access-{token}"
            doing = "write"
            fs.pipe_file(path, token.encode())
            doing = "read back"
            if fs.cat_file(path) != token.encode():
                return socket.gethostname(), f"read back other bytes than it wrote at {path}"
            doing = "delete"
            fs.rm(path)
            return socket.gethostname(), None
        except Exception as exc:  # noqa: BLE001 - any error of the store is the answer
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            return socket.gethostname(), f"could not {doing}: {type(exc).__name__}: {first}"
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    return probe_access


class NodeAccessCheck:
    """At every attempt: the nodes the workers were placed on, each checked once, with
    ``env`` (what the workers get from the driver: forwarded variables, the run's
    own)."""

    def __init__(self, run_url: str, env: dict[str, str], timeout_s: float = 60.0):
        self.run_url = run_url
        self.env = dict(env)
        self.timeout_s = timeout_s
        self.checked: set[str] = set()

    def __call__(self, node_ids: set[str]) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n for n in alive_nodes() if n["NodeID"] in set(node_ids) - self.checked]
        if not nodes:
            return
        task = ray.remote(num_cpus=0, max_retries=0)(_probe())
        token = uuid.uuid4().hex
        refs = {
            n["NodeID"]: task.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(self.run_url, f"{token}-{n['NodeID'][:12]}", self.env)
            for n in nodes
        }
        denied, unanswered, ok = [], [], set()
        for n in nodes:
            where = f"node {n['NodeManagerAddress']} ({n['NodeID'][:12]})"
            try:
                host, problem = ray.get(refs[n["NodeID"]], timeout=self.timeout_s)
            except Exception as exc:  # noqa: BLE001 - no answer: neither able nor not
                unanswered.append(f"{where}: {type(exc).__name__}")
                continue
            if problem is None:
                ok.add(n["NodeID"])
            else:
                denied.append(f"{where}, host {host}: {problem}")
        self.checked |= ok
        if denied:
            raise ConfigError(
                f"the workers cannot use the run's storage {self.run_url} from "
                + "; ".join(denied)
                + ". A worker uses its node's own credentials (an instance profile, a "
                "service account, ~/.aws): give that node's pool its own (Ray's cloud "
                "launchers give theirs to the head only; raytf validate names such a "
                "pool), or RunConfig(forward_credentials=True) where the driver's are "
                "variables"
            )
        if unanswered:
            raise WorkerSetupError(
                "the check that every worker's node can use the run's storage did not run "
                f"on {'; '.join(unanswered)}: the next attempt asks again"
            )
