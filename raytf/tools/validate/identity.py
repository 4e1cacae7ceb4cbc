"""Whether every node's processes can reach the run's storage with credentials of their
own: a worker pool with no identity for the bucket.

Ray's cloud launchers attach their own instance profile (AWS) or service account (GCP)
to the head node only. The driver's storage check runs on the head and passes; each
worker's first checkpoint upload then fails, and ``forward_credentials`` cannot help
(the head's credentials come from instance metadata, not from variables). So every
worker pool names its own: ``IamInstanceProfile`` (AWS) or ``serviceAccounts`` (GCP) in
its ``node_config``; on Kubernetes each pod group a ``serviceAccountName`` bound to a
cloud role (IRSA's ``eks.amazonaws.com/role-arn``, GKE Workload Identity's
``iam.gke.io/gcp-service-account``). An error where the config names object storage of
that cloud; a warning otherwise (a run on a file system every node mounts needs none),
and always on Kubernetes (the namespace's default account may carry the role).
"""

from __future__ import annotations

from typing import Any

import yaml

from raytf.tools.validate.rules import Problem

# provider -> (node_config key, what it is, the storage scheme it reaches, the fix)
_LAUNCHER = {
    "aws": (
        "IamInstanceProfile",
        "instance profile",
        "s3://",
        "add IamInstanceProfile: {Name: raytf-worker}, a profile whose role may "
        "s3:GetObject, s3:PutObject, s3:DeleteObject and s3:ListBucket on the run's bucket, "
        "and let the head's role iam:PassRole it (the commands: cluster_configs/aws-gpu.yaml)",
    ),
    "gcp": (
        "serviceAccounts",
        "service account",
        "gs://",
        "add serviceAccounts: [{email: raytf-worker@PROJECT.iam.gserviceaccount.com, "
        "scopes: [https://www.googleapis.com/auth/cloud-platform]}], an account with "
        "roles/storage.objectUser on the run's bucket (cluster_configs/gcp-gpu.yaml)",
    ),
}
_K8S_FIX = (
    "set serviceAccountName to an account bound to a role that may read, write, list and "
    "delete in the run's bucket (EKS: the eks.amazonaws.com/role-arn annotation, IRSA; "
    "GKE: iam.gke.io/gcp-service-account, Workload Identity; cluster_configs/kuberay/)"
)


def _names_storage(doc: Any, scheme: str) -> bool:
    return scheme in yaml.safe_dump(doc)


def launcher_pools(path: str, provider: str | None, workers: dict, config: dict) -> list[Problem]:
    """Each worker pool of a cluster-launcher config without an identity of its own."""
    if provider not in _LAUNCHER:
        return []
    key, what, scheme, fix = _LAUNCHER[provider]
    named = _names_storage(config, scheme)
    return [
        Problem(
            path,
            f"available_node_types.{name}.node_config",
            f"the worker pool {name} has no {what} ({key}): Ray's launcher gives its own "
            "to the head only, so the driver's storage check passes on the head and each "
            "worker's first checkpoint upload fails",
            fix,
            warning=not named,
        )
        for name, node in workers.items()
        if key not in (node.get("node_config") or {})
    ]


def kuberay_groups(path: str, base: str, spec: dict) -> list[Problem]:
    """Each pod group of a RayCluster spec that names no service account."""
    groups = [("headGroupSpec", spec.get("headGroupSpec") or {})]
    groups += [
        (f"workerGroupSpecs.{i}", g) for i, g in enumerate(spec.get("workerGroupSpecs") or [])
    ]
    problems = []
    for where, group in groups:
        pod = (group.get("template") or {}).get("spec") or {}
        if not pod.get("serviceAccountName"):
            problems.append(
                Problem(
                    path,
                    f"{base}.{where}.template.spec.serviceAccountName",
                    "the pods run under the namespace's default service account: unless it "
                    "is bound to a cloud role, they cannot reach the run's bucket",
                    _K8S_FIX,
                    warning=True,
                )
            )
    return problems
