"""raytf's rules for KubeRay manifests (``RayCluster``, ``RayJob``).

Ray's launcher schema does not cover these custom resources, so only raytf's
rules apply: replica ranges, Ray's GPU count against the pod's GPU limit, the
pool resource written as quoted JSON, raytf installed for a job, no storage
under a node's temp directory and no placeholder left in (``storage.py``), and,
given a job's per-worker resources, a worker group that fits it.
"""

from __future__ import annotations

import json
from typing import Any

from raytf.tools.validate import identity
from raytf.tools.validate.rules import Problem, credentials, job_fits, other_raytf_problem
from raytf.tools.validate.storage import storage_and_placeholders


def check_kuberay(
    path: str, doc: dict[str, Any], job_resources: dict[str, float] | None
) -> list[Problem]:
    problems = credentials(path, doc, "") + storage_and_placeholders(path, doc)
    spec = doc.get("spec") or {}
    base = "spec"
    if doc["kind"] == "RayJob":
        images = " ".join(_images(spec.get("rayClusterSpec") or {}))
        runtime_env = str(spec.get("runtimeEnvYAML", ""))
        if "raytf" not in runtime_env + images:
            problems.append(
                Problem(
                    path,
                    "spec.runtimeEnvYAML",
                    "nothing installs raytf for the job",
                    "give runtimeEnvYAML a working_dir holding this checkout (make dist) and "
                    "the pip list of cluster_configs/kuberay/runtime_env/gpu.yaml, or use "
                    "an image with raytf",
                )
            )
        other = other_raytf_problem(path, "spec.runtimeEnvYAML", runtime_env)
        if other is not None:
            problems.append(other)
        if not spec.get("entrypoint"):
            problems.append(Problem(path, "spec.entrypoint", "no entrypoint", "add one"))
        spec = spec.get("rayClusterSpec") or {}
        base = "spec.rayClusterSpec"
    if "headGroupSpec" not in spec:
        problems.append(Problem(path, f"{base}.headGroupSpec", "missing", "add a head group"))
    problems += _exposure(path, base, spec)
    problems += identity.kuberay_groups(path, base, spec)
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
        problems += job_fits(path, f"{base}.workerGroupSpecs", pools, job_resources)
    return problems


def _exposure(path: str, base: str, spec: dict) -> list[Problem]:
    """Without Ray's token authentication, anyone who reaches the head's pod (every pod of
    a shared cluster, unless a NetworkPolicy says otherwise) can submit jobs: run code
    as the cluster, read its runs' credentials and checkpoints."""
    if (spec.get("authOptions") or {}).get("mode") == "token":
        return []
    head = (spec.get("headGroupSpec") or {}).get("rayStartParams") or {}
    wide = str(head.get("dashboard-host", "0.0.0.0")) in ("0.0.0.0", "::")
    return [
        Problem(
            path,
            f"{base}.authOptions",
            "no token authentication: the job API"
            + (" on every interface of the head pod" if wide else "")
            + " takes anyone's job",
            "set authOptions: {mode: token} (KubeRay >= 1.5.1, Ray >= 2.52) and a "
            "NetworkPolicy that admits only your namespace",
            warning=True,
        )
    ]


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
