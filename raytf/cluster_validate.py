"""``raytf validate``: check cluster YAML before ``ray up`` spends money on it.

Launcher YAML goes through Ray's own path, the one ``ray up`` takes
(``prepare_config`` fills the provider's defaults, ``validate_config`` applies
``ray-schema.json`` and Ray's cross-field checks), so a file that passes here
is one the launcher accepts. Then raytf's rules, which Ray does not know:
pools that look like GPU machines declare GPUs (and the other way round), each
node installs raytf, the GPU pools the ``gpu`` extra, a node type's
``min_workers`` is not above its ``max_workers``, no credentials are written
in, and, given ``--job-resources``, one worker of the job fits some pool.
KubeRay manifests (``RayCluster``, ``RayJob``) are custom resources Ray's
schema does not cover; raytf's rules apply to their worker groups.

Every problem names the file, the field path and a fix.
"""

from __future__ import annotations

import copy
import difflib
import json
import logging
from dataclasses import dataclass
from typing import Any

import yaml

CREDENTIAL_KEYS = {
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "private_key",
    "client_secret",
    "password",
    "token",
}
_GPU_INSTANCE_PREFIXES = ("p2", "p3", "p4", "p5", "g4", "g5", "g6", "trn", "inf")


@dataclass(frozen=True)
class Problem:
    file: str
    path: str
    message: str
    fix: str = ""
    warning: bool = False

    def __str__(self) -> str:
        where = f"{self.file}: {self.path or '(top level)'}"
        kind = "warning" if self.warning else "error"
        fix = f"\n    fix: {self.fix}" if self.fix else ""
        return f"{where}: {kind}: {self.message}{fix}"


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
            problems += _check_kuberay(path, doc, job_resources)
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
    problems = _credentials(path, config, "")
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
    if provider != "fake_multinode":  # fake nodes are local processes: nothing to install
        problems += _installs_raytf(path, config, types, head)
    if job_resources:
        pools = {n: t.get("resources", {}) for n, t in workers.items()}
        if provider == "local":
            pools = {"local.cluster.node": _resources_from_start(config)}
        problems += _job_fits(path, "available_node_types", pools, job_resources)
    return problems


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
        if "raytf" not in cmds:
            problems.append(
                Problem(
                    path,
                    field,
                    f"node type {name} does not install raytf",
                    f"add `pip install 'raytf[{'cpu' if is_head else 'gpu'}]'` to {field}",
                )
            )
            continue
        gpus = (node or {}).get("resources", {}).get("GPU", 0)
        if gpus and "gpu" not in cmds:
            problems.append(
                Problem(
                    path,
                    field,
                    f"GPU node type {name} installs raytf without the gpu extra "
                    "(TensorFlow without CUDA would not see its GPUs)",
                    "install 'raytf[gpu]' there",
                )
            )
    return problems


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


def _job_fits(
    path: str, where: str, pools: dict[str, dict], job_resources: dict[str, float]
) -> list[Problem]:
    def fits(res: dict) -> bool:
        # A resource a pool leaves out (CPU on the local provider) is detected at start.
        return all(
            float(res.get(k, float("inf") if k in ("CPU", "memory") else 0)) >= v
            for k, v in job_resources.items()
            if v
        )

    if any(fits(res) for res in pools.values()):
        return []
    shown = ", ".join(f"{n} {res}" for n, res in pools.items()) or "none"
    return [
        Problem(
            path,
            where,
            f"no worker pool can hold one worker of the job ({job_resources}); pools: {shown}",
            "add or enlarge a pool, or ask for less per worker (ScalingConfig)",
        )
    ]


def _credentials(path: str, doc: Any, where: str) -> list[Problem]:
    problems = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            here = f"{where}.{key}" if where else str(key)
            if str(key).lower() in CREDENTIAL_KEYS and isinstance(value, str):
                problems.append(
                    Problem(
                        path,
                        here,
                        "a credential is written into the config",
                        "remove it: use instance roles / service accounts, and key paths only",
                    )
                )
            problems += _credentials(path, value, here)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            problems += _credentials(path, value, f"{where}.{i}")
    return problems


# -- KubeRay ------------------------------------------------------------------------
def _check_kuberay(
    path: str, doc: dict[str, Any], job_resources: dict[str, float] | None
) -> list[Problem]:
    problems = _credentials(path, doc, "")
    spec = doc.get("spec") or {}
    base = "spec"
    if doc["kind"] == "RayJob":
        images = " ".join(_images(spec.get("rayClusterSpec") or {}))
        if "raytf" not in str(spec.get("runtimeEnvYAML", "")) + images:
            problems.append(
                Problem(
                    path,
                    "spec.runtimeEnvYAML",
                    "nothing installs raytf for the job",
                    'add pip: ["raytf[gpu]"] to runtimeEnvYAML, or use an image with raytf',
                )
            )
        if not spec.get("entrypoint"):
            problems.append(Problem(path, "spec.entrypoint", "no entrypoint", "add one"))
        spec = spec.get("rayClusterSpec") or {}
        base = "spec.rayClusterSpec"
    if "headGroupSpec" not in spec:
        problems.append(Problem(path, f"{base}.headGroupSpec", "missing", "add a head group"))
    pools = {}
    groups = spec.get("workerGroupSpecs") or []
    for i, group in enumerate(groups):
        where = f"{base}.workerGroupSpecs.{i}"
        lo, hi = group.get("minReplicas", 0), group.get("maxReplicas")
        if hi is not None and lo > hi:
            problems.append(
                Problem(
                    path,
                    f"{where}.minReplicas",
                    f"minReplicas {lo} is above maxReplicas {hi}",
                    f"set minReplicas <= {hi}",
                )
            )
        params = group.get("rayStartParams") or {}
        limits = {}
        for c in (group.get("template") or {}).get("spec", {}).get("containers", []):
            limits.update((c.get("resources") or {}).get("limits") or {})
        k8s_gpus = float(limits.get("nvidia.com/gpu", 0))
        ray_gpus = float(params.get("num-gpus", k8s_gpus))
        if k8s_gpus != ray_gpus:
            problems.append(
                Problem(
                    path,
                    f"{where}.rayStartParams.num-gpus",
                    f"Ray is told {ray_gpus:g} GPU but the pod is given {k8s_gpus:g}",
                    "make num-gpus equal the container's nvidia.com/gpu limit",
                )
            )
        res = {"GPU": ray_gpus, "CPU": _cpu(limits.get("cpu", 0))}
        try:
            res.update(json.loads(json.loads(params.get("resources", '"{}"'))))
        except (TypeError, ValueError):
            problems.append(
                Problem(
                    path,
                    f"{where}.rayStartParams.resources",
                    "not a quoted JSON object",
                    'write it as \'"{\\"pool_gpu\\": 1}"\'',
                )
            )
        pools[group.get("groupName", str(i))] = res
    if spec.get("enableInTreeAutoscaling") is not True and any(
        g.get("minReplicas", 0) != g.get("maxReplicas", 0) for g in groups
    ):
        problems.append(
            Problem(
                path,
                f"{base}.enableInTreeAutoscaling",
                "worker groups have a replica range but the autoscaler is off",
                "set enableInTreeAutoscaling: true",
                warning=True,
            )
        )
    if job_resources:
        problems += _job_fits(path, f"{base}.workerGroupSpecs", pools, job_resources)
    return problems


def _cpu(value: Any) -> float:
    text = str(value)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text or 0)


def _images(cluster_spec: dict) -> list[str]:
    groups = [cluster_spec.get("headGroupSpec") or {}]
    groups += cluster_spec.get("workerGroupSpecs") or []
    return [
        str(c.get("image", ""))
        for g in groups
        for c in (g.get("template") or {}).get("spec", {}).get("containers", [])
    ]
