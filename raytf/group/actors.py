"""How raytf's worker actors are made and ended: their environment, resources and end.

Shared by the pool (a run's workers, standbys and spares) and the kept
processes that outlive runs (``raytf.group.kept``).
"""

from __future__ import annotations

import logging
import os

import ray

from raytf.settings import WORKER_ENV

logger = logging.getLogger("raytf")

# The driver's settings for reaching storage travel to the workers: a worker opens the
# run's URL itself, and on an existing cluster its process did not inherit the
# driver's environment (endpoint, credentials, region). So do the logging variables a
# user sets to quiet (or question) TensorFlow, NCCL and gRPC, and the choice of tf.keras
# (tf_keras under TF_USE_LEGACY_KERAS=1, as every Ray Train TF example sets), but never
# TF_CONFIG: each worker's is its own.
FORWARDED_PREFIXES = (
    "FSSPEC_",
    "AWS_",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "RAYTF_",
    "TF_CPP_",
    "NCCL_DEBUG",
    "GRPC_VERBOSITY",
    "GRPC_TRACE",
    "ABSL_",
    "TF_USE_LEGACY_KERAS",  # read at TensorFlow's import: which Keras tf.keras is
)


def worker_env(environ=None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    out = dict(WORKER_ENV)
    out.update({k: v for k, v in env.items() if k.startswith(FORWARDED_PREFIXES)})
    return out


def actor_options(bundle: dict[str, float]) -> dict:
    custom = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU", "memory")}
    options = {"num_cpus": bundle.get("CPU", 0), "num_gpus": bundle.get("GPU", 0)}
    if custom:
        options["resources"] = custom
    if "memory" in bundle:
        options["memory"] = bundle["memory"]
    return options


def kill_actor(actor) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception as exc:  # noqa: BLE001 - already gone is fine
        logger.debug("kill failed: %s", exc)
