"""What every cluster-config check shares: the problem report and rules for any format."""

from __future__ import annotations

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


def credentials(path: str, doc: Any, where: str) -> list[Problem]:
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
            problems += credentials(path, value, here)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            problems += credentials(path, value, f"{where}.{i}")
    return problems
