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


# -- which raytf an install command gets ------------------------------------------
# PyPI's project named "raytf" (0.0.1, 2021) is not this one (raytf.DISTRIBUTION): a
# requirement of that name installs it. A path ("$HOME/raytf[gpu]", "./raytf") is a
# checkout of this one, and `raytf status` a command, not a requirement.
_NOT_BEFORE = r"(?<![\w/.$~{}-])"
_RAYTF_REQUIREMENT = re.compile(
    _NOT_BEFORE + r"raytf(\[[^\]\n]*\]|(==|>=|<=|~=|!=|===)[^\s'\",\]]*)", re.IGNORECASE
)
_PIP_INSTALL = re.compile(r"\bpip3?\s+install\b([^\n;&|`)]*)")
_PIP_LIST = re.compile(r"""\bpip["']?\s*:""")
_BARE_NAME = re.compile(r"""^["']?raytf["']?$""", re.IGNORECASE)
_LIST_ITEM = re.compile(r"""^\s*-\s*["']?raytf["']?\s*$""", re.IGNORECASE | re.MULTILINE)
_QUOTED_NAME = re.compile(r"""["']raytf["']""", re.IGNORECASE)


def pypi_raytf(text: str) -> list[str]:
    """Where ``text`` (a command, a config, a doc) asks for the distribution named raytf:
    ``raytf[gpu]``, ``raytf==0.1``, ``pip install raytf``, a runtime env's
    ``"pip": ["raytf"]``. Each hit as written."""
    hits = [m.group(0) for m in _RAYTF_REQUIREMENT.finditer(text)]
    for m in _PIP_INSTALL.finditer(text):
        hits += [arg for arg in m.group(1).split() if _BARE_NAME.match(arg)]
    for line in text.splitlines():
        if _PIP_LIST.search(line):
            hits += _QUOTED_NAME.findall(line)
    hits += [m.group(0).strip() for m in _LIST_ITEM.finditer(text)]
    return hits


def other_raytf_problem(path: str, field: str, text: str, who: str = "") -> Problem | None:
    """``who`` (a node type's name) starts the message where one field serves several."""
    found = pypi_raytf(text)
    if not found:
        return None
    return Problem(
        path,
        field,
        f"{who}{found[0]} installs PyPI's project named raytf, which is not this raytf",
        'install this checkout (pip install -e "$HOME/raytf[gpu]" after file_mounts '
        "copies it) or ship it in the job's working_dir; this project's distribution is "
        "raytf-mwms",
    )
