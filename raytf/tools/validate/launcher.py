"""``raytf validate``: check cluster YAML before ``ray up`` spends money on it.

Launcher YAML goes through Ray's own path, the one ``ray up`` takes
(``prepare_config`` fills the provider's defaults, ``validate_config`` applies
``ray-schema.json`` and Ray's cross-field checks), so a file that passes here
is one the launcher accepts. Then raytf's rules, which Ray does not know:
pools that look like GPU machines declare GPUs (and the other way round), each
node installs raytf, the GPU pools the ``gpu`` extra, a node type's
``min_workers`` is not above its ``max_workers``, no credentials are written
in, no storage under a node's temp directory and no placeholder left in
(``storage.py``), and, given ``--job-resources``, one worker of the job fits
some pool.
KubeRay manifests (``RayCluster``, ``RayJob``) are custom resources Ray's
schema does not cover; raytf's rules apply to their worker groups.

Every problem names the file, the field path and a fix.
"""

from __future__ import annotations

import copy
import difflib
import json
import logging
import re
from typing import Any

import yaml

from raytf.tools.validate import identity
from raytf.tools.validate.kuberay import check_kuberay
from raytf.tools.validate.rules import Problem, credentials, job_fits, other_raytf_problem
from raytf.tools.validate.storage import storage_and_placeholders

_GPU_INSTANCE_PREFIXES = ("p2", "p3", "p4", "p5", "g4", "g5", "g6")  # NVIDIA GPU families


def validate_file(path: str, job_resources: dict[str, float] | None = None) -> list[Problem]:
    try:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
    except OSError as exc:
        return [Problem(path, "", f"cannot read: {exc.strerror}")]
    except yaml.YAMLError as exc:
        return [Problem(path, "", f"not valid YAML: {exc}", "fix the YAML syntax")]
    if not docs:
        return [Problem(path, "", "the file is empty")]
    problems: list[Problem] = []
    for doc in docs:
        if not isinstance(doc, dict):
            problems.append(Problem(path, "", "the document is not a mapping"))
        elif doc.get("kind") in ("RayCluster", "RayJob"):
            problems += check_kuberay(path, doc, job_resources)
        elif "apiVersion" in doc and "kind" in doc:  # another Kubernetes object
            problems += credentials(path, doc, "") + storage_and_placeholders(path, doc)
        else:
            problems += _check_launcher(path, doc, job_resources)
    return problems


# -- the cluster launcher ---------------------------------------------------------
def _ray_validate(config: dict[str, Any]) -> tuple[dict[str, Any] | None, Exception | None]:
    """Ray's own preparation and validation, as ``ray up`` runs them."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    logging.getLogger("ray.autoscaler").setLevel(logging.WARNING)  # its INFO lines are noise
    try:
        prepared = prepare_config(copy.deepcopy(config))
    except FileNotFoundError:
        # fake_multinode's defaults file is missing from the 2.60 wheel (``ray up`` of it
        # fails too); the schema and Ray's checks still apply to the file as written.
        prepared = copy.deepcopy(config)
        prepared.setdefault("cluster_synced_files", [])
    except Exception as exc:  # noqa: BLE001 - Ray raises ValueError, ClickException, ...
        return None, exc
    try:
        validate_config(prepared)
    except Exception as exc:  # noqa: BLE001
        return prepared, exc
    return prepared, None


def _schema_problem(path: str, exc: Exception, config: dict[str, Any]) -> Problem:
    import jsonschema

    if isinstance(exc, jsonschema.ValidationError):
        field = ".".join(str(p) for p in exc.absolute_path)
        fix = ""
        if exc.validator == "additionalProperties":
            allowed = set(exc.schema.get("properties", {}))
            extra = [k for k in (exc.instance or {}) if k not in allowed]
            hints = [
                f"'{k}' -> did you mean '{m[0]}'?"
                for k in extra
                if (m := difflib.get_close_matches(k, allowed, n=1))
            ]
            fix = "; ".join(hints) or f"remove the unknown key(s) {extra}"
        elif exc.validator == "type" and exc.validator_value == "integer":
            fix = "Ray counts node resources in whole units: use an integer"
        elif exc.validator == "minimum":
            fix = f"use a value >= {exc.validator_value}"
        elif exc.validator == "required":
            fix = "add the missing field"
        return Problem(path, field, f"Ray's schema: {exc.message}", fix)
    text = str(getattr(exc, "message", None) or exc)
    field = "head_node_type" if "head_node_type" in text else ""
    fix = ""
    if field:
        types = sorted(config.get("available_node_types", {}))
        fix = f"set head_node_type to one of {types}"
    return Problem(path, field, f"Ray's launcher: {text}", fix)


def _check_launcher(
    path: str, config: dict[str, Any], job_resources: dict[str, float] | None
) -> list[Problem]:
    prepared, error = _ray_validate(config)
    if error is not None:
        return [_schema_problem(path, error, config)]
    assert prepared is not None
    problems = credentials(path, config, "") + storage_and_placeholders(path, config)
    provider = config.get("provider", {}).get("type")
    types = config.get("available_node_types") or {}
    head = config.get("head_node_type")
    workers = {n: t for n, t in types.items() if n != head}
    for name, node in types.items():
        where = f"available_node_types.{name}"
        lo, hi = node.get("min_workers", 0), node.get("max_workers")
        if hi is not None and lo > hi:
            problems.append(
                Problem(
                    path,
                    f"{where}.min_workers",
                    f"min_workers {lo} is above max_workers {hi}",
                    f"set min_workers <= {hi} or raise max_workers",
                )
            )
        problems += _gpu_agreement(path, where, provider, node)
    for name, node in workers.items():
        if not any(k.startswith("pool_") for k in node.get("resources", {})):
            problems.append(
                Problem(
                    path,
                    f"available_node_types.{name}.resources",
                    "no custom resource names this pool, so a job cannot target it",
                    f"add pool_{name.replace('.', '_')}: 1",
                    warning=True,
                )
            )
    if provider == "local":
        problems += _local_provider(path, config)
    problems += identity.launcher_pools(path, provider, workers, config)
    problems += _synced_checkout(path, config)
    problems += _exposure(path, config)
    if provider != "fake_multinode":  # fake nodes are local processes: nothing to install
        problems += _installs_raytf(path, config, types, head)
    if job_resources:
        pools = {n: t.get("resources", {}) for n, t in workers.items()}
        if provider == "local":
            pools = {"local.cluster.node": _resources_from_start(config)}
        problems += job_fits(path, "available_node_types", pools, job_resources)
    return problems


def _exposure(path: str, config: dict) -> list[Problem]:
    """A head whose dashboard (the job API) listens on every interface without Ray's
    token authentication takes a job from anyone who reaches the machine: code run as
    the cluster, with its runs' data and credentials. Ray's default is 127.0.0.1."""
    problems = []
    if "RAY_AUTH_MODE=token" in json.dumps(config):  # set anywhere (setup, docker env...)
        return problems
    for i, command in enumerate(config.get("head_start_ray_commands") or []):
        wide = re.search(r"--dashboard-host[= ]+['\"]?(0\.0\.0\.0|::)(?![\w.:])", str(command))
        if wide:
            problems.append(
                Problem(
                    path,
                    f"head_start_ray_commands.{i}",
                    f"the dashboard listens on {wide.group(1)} without token authentication: "
                    "its job API takes anyone's job",
                    "keep --dashboard-host=127.0.0.1 (reach it over `ray dashboard`'s SSH "
                    "tunnel), or start the head with RAY_AUTH_MODE=token and a security "
                    "group that admits only your network",
                    warning=True,
                )
            )
    return problems


def _synced_checkout(path: str, config: dict) -> list[Problem]:
    """A file mount of a local directory copies everything in it to every node at
    ``ray up``: a checkout's virtualenv (1.5 GB with TensorFlow) too, unless the copy
    honours .gitignore (measured: 73 s to a ready 3-node loopback cluster, 17-20 s
    without the venv)."""
    local_dirs = [
        remote
        for remote, local in (config.get("file_mounts") or {}).items()
        if isinstance(local, str) and not local.startswith(("s3://", "gs://"))
    ]
    if not local_dirs or config.get("rsync_filter") or config.get("rsync_exclude"):
        return []
    return [
        Problem(
            path,
            "file_mounts",
            f"{', '.join(local_dirs)}: every file of the local directory goes to every node, "
            "a virtualenv or build output in it included",
            'add `rsync_filter: [".gitignore"]` (or an rsync_exclude list)',
            warning=True,
        )
    ]


def _looks_like_gpu(provider: str | None, node_config: dict[str, Any]) -> bool | None:
    """What the machine itself says about GPUs; None when the provider does not tell."""
    if provider == "aws":
        itype = str(node_config.get("InstanceType", ""))
        return itype.startswith(_GPU_INSTANCE_PREFIXES)
    if provider == "gcp":
        return bool(node_config.get("guestAccelerators"))
    return None


def _gpu_agreement(path: str, where: str, provider: str | None, node: dict) -> list[Problem]:
    gpus = node.get("resources", {}).get("GPU", 0)
    machine = _looks_like_gpu(provider, node.get("node_config", {}))
    if machine is True and not gpus:
        return [
            Problem(
                path,
                f"{where}.resources",
                "the machine has GPUs but the pool declares none: Ray would never "
                "schedule a GPU worker there",
                "add GPU: <GPUs per machine> to resources",
            )
        ]
    if machine is False and gpus:
        return [
            Problem(
                path,
                f"{where}.resources.GPU",
                f"the pool declares {gpus} GPU but its machine type has none",
                "use a GPU machine type (AWS p*/g*, GCP guestAccelerators) or drop GPU",
            )
        ]
    return []


def _commands(config: dict, node: dict | None, head: bool) -> list[str]:
    key = "head_setup_commands" if head else "worker_setup_commands"
    own = (node or {}).get("worker_setup_commands") if not head else None
    return list(config.get("setup_commands", [])) + list(own or config.get(key, []))


def _installs_raytf(path: str, config: dict, types: dict, head: str | None) -> list[Problem]:
    problems = []
    nodes: dict[str, tuple[dict | None, bool]] = {n: (t, n == head) for n, t in types.items()}
    if not types:  # the local provider: one head, one worker type
        nodes = {"head": (None, True), "workers": (None, False)}
    for name, (node, is_head) in nodes.items():
        cmds = " ".join(_commands(config, node, is_head))
        field = "head_setup_commands" if is_head else "worker_setup_commands"
        extra = "cpu" if is_head else "gpu"
        if "raytf" not in cmds:
            problems.append(
                Problem(
                    path,
                    field,
                    f"node type {name} does not install raytf",
                    f'add `python -m pip install -e "$HOME/raytf[{extra}]"` to {field} '
                    "(file_mounts copies this checkout to ~/raytf)",
                )
            )
            continue
        other = other_raytf_problem(path, field, cmds, f"node type {name}: ")
        if other is not None:
            problems.append(other)
            continue
        gpus = (node or {}).get("resources", {}).get("GPU", 0)
        if gpus and "gpu" not in cmds:
            problems.append(
                Problem(
                    path,
                    field,
                    f"GPU node type {name} installs raytf without the gpu extra "
                    "(TensorFlow without CUDA would not see its GPUs)",
                    'install the gpu extra there ("$HOME/raytf[gpu]")',
                )
            )
    return problems


def _local_provider(path: str, config: dict) -> list[Problem]:
    """What ``ray up`` of a ``local`` provider config found that Ray's checks do not."""
    provider = config.get("provider", {})
    if "coordinator_address" in provider or len(provider.get("worker_ips") or []) < 2:
        return []
    # Ray 2.60's ``ray up`` exports RAY_enable_autoscaler_v2=1 before the head's commands;
    # v2 with the local provider started the first of worker_ips and never the rest
    # (it kept "adding 1 node to satisfy min count"), while v1 starts them all.
    head = " ".join(config.get("head_start_ray_commands") or [])
    if "RAY_enable_autoscaler_v2=0" in head:
        return []
    return [
        Problem(
            path,
            "head_start_ray_commands",
            "`ray up` starts the head with Ray's autoscaler v2, which brings up only the "
            "first of the local provider's worker_ips",
            "start the head with `RAY_enable_autoscaler_v2=0 ray start --head ...`",
        )
    ]


def _resources_from_start(config: dict) -> dict[str, float]:
    """A local-provider pool's resources, read from its ``ray start`` flags."""
    out: dict[str, float] = {}
    for cmd in config.get("worker_start_ray_commands", []):
        for part in cmd.split():
            if part.startswith("--num-gpus="):
                out["GPU"] = float(part.split("=", 1)[1])
            elif part.startswith("--num-cpus="):
                out["CPU"] = float(part.split("=", 1)[1])
            elif part.startswith("--resources="):
                try:
                    out.update(json.loads(part.split("=", 1)[1].strip("'")))
                except ValueError:
                    pass
    return out
