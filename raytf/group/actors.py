"""How raytf's worker actors are made and ended: their environment, resources and end.

Shared by the pool (a run's workers, standbys and spares) and the kept
processes that outlive runs (``raytf.group.kept``).
"""

from __future__ import annotations

import json
import logging
import os
import re

import ray

from raytf.settings import WORKER_ENV

logger = logging.getLogger("raytf")

# The driver's settings for reaching storage travel to the workers: a worker opens the
# run's URL itself, and on an existing cluster its process did not inherit the
# driver's environment (endpoint, region). So do the logging variables a user sets to
# quiet (or question) TensorFlow, NCCL and gRPC, and the choice of tf.keras (tf_keras
# under TF_USE_LEGACY_KERAS=1, as every Ray Train TF example sets), but never
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

# Credentials among them stay on the driver unless the run asks
# (``RunConfig.forward_credentials``): copied into a worker they would override its
# node's own chain (instance role, service account, ~/.aws), never refresh (a token that
# expires ends a days-long run) and would reach every process of the run. A name is
# taken for one if any word of it says so: AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
# AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE, FSSPEC_S3_SECRET, FSSPEC_GCS_TOKEN...
_CREDENTIAL_WORDS = re.compile(
    r"(^|[_.-])(KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIALS?|PROFILE|ROLE|AUTH\w*|SESSION"
    r"|COOKIE|API[_-]?KEY|ACCOUNT[_-]?KEY|SAS[_-]?TOKEN|CONNECTION[_-]?STRING|SIGNATURE)"
    r"([_.-]|$)",
    re.IGNORECASE,
)
# fsspec also reads a protocol's whole configuration from one variable as JSON
# (FSSPEC_S3='{"key": ..., "secret": ...}'): a credential if any key at any depth is one
# (client_kwargs' aws_secret_access_key, an HTTP header's Authorization or X-Api-Key).
_FSSPEC_JSON = re.compile(r"^FSSPEC_[A-Za-z0-9]+$")
# A URL with userinfo (s3://user:pass@bucket, https://token@host) carries its secret in
# the value, whatever the variable is called; so do the forms below.
_URL_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s]+@")
# A secret in a value: an Azure connection string's key or signature, a database one's
# password, a signed URL's signature (SAS, S3 and GCS presigned).
_SECRET_IN_VALUE = re.compile(
    r"(^|[;\s])(AccountKey|SharedAccessKey|SharedAccessSignature|Password|Pwd)=[^;\s]"
    r"|[?&](sig|X-Amz-Signature|X-Amz-Security-Token|X-Goog-Signature|Signature)=",
    re.IGNORECASE,
)


def _secret_in(value: str) -> bool:
    return bool(_URL_USERINFO.search(value) or _SECRET_IN_VALUE.search(value))


# Read when the process starts or TensorFlow is imported, not when used: a process
# kept with TensorFlow imported (``raytf.group.kept``) serves only a run whose values
# of these are its own (TF_CONFIG is set by raytf later).
_IMPORT_TIME = (
    "TF_",
    "KERAS_",
    "XLA_",
    "ABSL_",
    "GRPC_",
    "NCCL_",
    "OMP_",
    "MKL_",
    "PYTHONHASHSEED",
)
_SET_LATER = ("TF_CONFIG",)


def is_credential(name: str, value: str | None = None) -> bool:
    """Whether ``name`` (with ``value``, for fsspec's JSON form) holds a credential."""
    if name == "GOOGLE_APPLICATION_CREDENTIALS" or _CREDENTIAL_WORDS.search(name):
        return True
    if value and _secret_in(value):
        return True
    if _FSSPEC_JSON.match(name):
        try:
            doc = json.loads(value or "{}")
        except ValueError:
            return True  # unreadable: not worth the doubt
        return not isinstance(doc, dict) or _holds_credential(doc)
    return False


def _holds_credential(doc) -> bool:
    """Whether a JSON document has a credential's key, or a secret in a value, anywhere."""
    if isinstance(doc, dict):
        return any(_CREDENTIAL_WORDS.search(str(k)) or _holds_credential(v) for k, v in doc.items())
    if isinstance(doc, list):
        return any(_holds_credential(v) for v in doc)
    return isinstance(doc, str) and _secret_in(doc)


def worker_env(environ=None, credentials: bool = False) -> dict[str, str]:
    """The variables a worker gets from the driver; its credentials only if asked."""
    env = os.environ if environ is None else environ
    forwarded = {k: v for k, v in env.items() if k.startswith(FORWARDED_PREFIXES)}
    return {**WORKER_ENV, **(forwarded if credentials else without_credentials(forwarded))}


def without_credentials(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not is_credential(k, v)}


def credential_env(environ=None) -> dict[str, str]:
    """The driver's credentials among the forwarded variables (``forward_credentials``)."""
    env = os.environ if environ is None else environ
    return {
        k: v for k, v in env.items() if k.startswith(FORWARDED_PREFIXES) and is_credential(k, v)
    }


def import_time_env(env: dict[str, str]) -> dict[str, str]:
    """Those of ``env`` that take effect only at a process's start or TF's import."""
    return {k: v for k, v in env.items() if k.startswith(_IMPORT_TIME) and k not in _SET_LATER}


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


def bundle_gpu_ids(strategy, gpus: int) -> list[str]:
    """The GPUs Ray gives a slot's bundle, asked by a task holding them all: a kept
    process (zero resources) gets them before TensorFlow touches CUDA."""

    @ray.remote(num_cpus=0, num_gpus=gpus)
    def ids() -> list[str]:
        return [str(g) for g in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]

    return ray.get(ids.options(scheduling_strategy=strategy).remote(), timeout=60)
