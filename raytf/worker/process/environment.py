"""A worker process's environment: the node's own, with the run's variables over it.

A worker's process starts with its node's environment (the raylet's, and the
job's runtime_env); the driver's variables (``raytf.group.actors.worker_env``)
go over it, raytf's own defaults yielding to the node's. A process kept from
an earlier run (``raytf.group.kept``) was started with that run's driver's
variables: when a new run claims it, every variable the earlier driver set is
put back to the node's value (or removed) before the new run's are applied, so
nothing of the earlier run (an endpoint, a log setting, a credential it
forwarded) is left in it. What the process itself set since (Ray, an import)
stays. A claimed process ends with its run: there is no second release to clear.
"""

from __future__ import annotations

import os

from raytf.settings import WORKER_ENV

# The node's value of each variable a run set (None: the node had none).
Applied = dict[str, str | None]


def apply(env: dict[str, str]) -> Applied:
    """Apply the run's variables; what they replaced, for ``replace``."""
    return replace({}, env)


def replace(applied: Applied, env: dict[str, str]) -> Applied:
    """Undo the earlier run's variables (``applied``) and apply this run's, in one pass
    that never removes a variable both set (TensorFlow may still be importing on the
    process's other thread: a variable it reads must not blink)."""
    node = {key: applied[key] if key in applied else os.environ.get(key) for key in env}
    for key, value in applied.items():
        if key not in env:
            _set(key, value)
    for key, value in env.items():
        if WORKER_ENV.get(key) == value and node[key] is not None:
            _set(key, node[key])  # raytf's default yields to the node's
        else:
            os.environ[key] = value  # what the driver's user set wins
    return node


def _set(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value
