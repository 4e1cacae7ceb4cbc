"""What every cluster-config check shares: the problem report and rules for any format."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

CREDENTIAL_KEYS = {
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "private_key",
    "client_secret",
    "password",
    "token",
}


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


def job_fits(
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


_CREDENTIAL_ENV = re.compile(
    r"(^AWS_(SECRET_ACCESS_KEY|SESSION_TOKEN|ACCESS_KEY_ID)$|PASSWORD|SECRET|TOKEN|_KEY$)", re.I
)


def credentials(path: str, doc: Any, where: str) -> list[Problem]:
    """A credential written into a config: a key named like one with a string value, or
    a container's ``env:`` entry whose name is one and whose ``value`` is written out
    (``valueFrom`` a Secret is how it should come)."""
    problems = []
    if _env_entry_with_secret(doc):
        problems.append(
            Problem(
                path,
                f"{where}.value",
                f"the credential {doc['name']} is written into an env: list",
                "take it from a Secret (valueFrom.secretKeyRef), or use the pod's service "
                "account / the instance role",
            )
        )
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
            problems += credentials(path, value, here)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            problems += credentials(path, value, f"{where}.{i}")
    return problems


def _env_entry_with_secret(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("name"), str)
        and isinstance(doc.get("value"), str)
        and bool(doc["value"])
        and bool(_CREDENTIAL_ENV.search(doc["name"]))
    )
