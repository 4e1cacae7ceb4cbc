"""Storage a cluster's runs cannot keep, and values nobody filled in, in any config.

A run's checkpoints must outlive every node and be read by every node: a run
directory under a node's temp directory (``/tmp``, ``/var/tmp``, ``$TMPDIR``,
Ray's session directory) is neither: each node writes its own, the OS or Ray
clears it, and a restart on another node begins at step 0. A placeholder
(``your-bucket``, ``<bucket>``, ``example.com``, ``CHANGE_ME``) in a config is a
value the user was meant to replace: left as it is, the run fails only once the
cluster is up, or writes into someone else's bucket. What the user must fill in
is written as a variable (``$BUCKET``, ``${RAYTF_STORAGE}``) that ``envsubst`` or
the shell fills: explicit, documented, and not a placeholder here.

Storage is found where a job names it: a ``--storage``/``--storage-path``
argument or ``RAYTF_STORAGE_PATH=`` in any command or entrypoint, a
``RAYTF_STORAGE_PATH`` variable (a container's ``env:`` entry, a runtime
environment's ``env_vars``), ``storage_path=`` in inline Python; and
``raytf validate --storage URL`` checks a job's own argument.
"""

from __future__ import annotations

import os
import re
import tempfile
from typing import Any

import yaml

from raytf.tools.validate.rules import Problem

STORAGE_FIX = (
    "keep runs in object storage (s3://$BUCKET/raytf_results, gs://$BUCKET/...) or on a "
    "file system every node mounts at the same path (then RAYTF_STORAGE_SHARED=1)"
)
PLACEHOLDER_FIX = (
    "fill it in, or write what each user fills as a variable ($BUCKET, "
    "${RAYTF_STORAGE}) and substitute it when applying (envsubst < FILE)"
)

_STORAGE_ARG = re.compile(r"""--storage(?:[-_]path)?(?:=|\s+)(["']?)([^\s"';&|]+)\1""")
_STORAGE_ENV = re.compile(r"""\bRAYTF_STORAGE_PATH=(["']?)([^\s"';&|]+)\1""")
_STORAGE_KWARG = re.compile(r"""\bstorage_path\s*=\s*(["'])([^"']+)\1""")
_TEMP_VARS = re.compile(r"^\$(\{TMPDIR\}|TMPDIR\b)")
_TEMP_DIRS = ("/tmp", "/var/tmp", "/private/tmp", "/private/var/tmp")
_RAY_SESSION = re.compile(r"(^|/)(ray/)?session_(latest|\d{4}-\d{2}-\d{2}[\w.-]*)(/|$)")
_PLACEHOLDER = re.compile(
    r"\b(?i:your[-_][a-z0-9][a-z0-9_-]*)"  # your-org, your-bucket, YOUR_PROJECT
    r"|\b(?i:my[-_]bucket)\b"
    r"|<[A-Za-z][^<>\s]*>"  # <bucket>, <your-org>
    r"|\b(?i:example\.(?:com|org|net))\b"
    r"|\b(?i:change[_-]?me|replace[_-]?me|fill[_-]?me[_-]?in)\b"
    r"|\b(?:TODO|FIXME|XXXX*)\b"  # upper case only: "todo" may be a name
)


def temp_dir_of(storage: str) -> str | None:
    """The temp directory ``storage`` lies under ("/tmp", "$TMPDIR", "Ray's session
    directory"...), or None: an object-store URL or another path."""
    path = storage.strip().strip("'\"")
    if path.startswith("file://"):
        path = path[len("file://") :]
    elif "://" in path:
        return None
    if _TEMP_VARS.match(path):
        return "$TMPDIR"
    if _RAY_SESSION.search(path):
        return "Ray's session directory"
    norm = os.path.normpath(path) if path.startswith("/") else path
    local_tmp = os.path.normpath(tempfile.gettempdir())
    for top in (*_TEMP_DIRS, local_tmp):
        if norm == top or norm.startswith(top.rstrip("/") + "/"):
            return top
    return None


def placeholder_in(text: str) -> str | None:
    """The first placeholder in ``text`` as written, or None."""
    found = _PLACEHOLDER.search(text)
    return found.group(0) if found else None


def storage_in(text: str) -> list[str]:
    """Each storage path a command, entrypoint or inline script names."""
    out = []
    for pattern in (_STORAGE_ARG, _STORAGE_ENV, _STORAGE_KWARG):
        out += [m.group(2) for m in pattern.finditer(text)]
    return out


def check_storage(file: str, where: str, storage: str) -> list[Problem]:
    """One storage path, found at ``where`` (or given as ``--storage``)."""
    problems = []
    temp = temp_dir_of(storage)
    if temp is not None:
        problems.append(
            Problem(
                file,
                where,
                f"storage {storage} is under {temp}, a temp directory of each node: "
                "checkpoints there stay on the node that wrote them and are cleared "
                "with it",
                STORAGE_FIX,
            )
        )
    hole = placeholder_in(storage)
    if hole is not None:
        problems.append(
            Problem(
                file,
                where,
                f"storage {storage} holds the placeholder {hole!r}",
                "name your bucket: " + PLACEHOLDER_FIX,
            )
        )
    return problems


def storage_and_placeholders(file: str, doc: Any, where: str = "") -> list[Problem]:
    """Every storage path in a config checked, and any other placeholder reported; a
    runtime environment written as YAML text (KubeRay's runtimeEnvYAML) read as one."""
    problems: list[Problem] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            here = f"{where}.{key}" if where else str(key)
            if key == "RAYTF_STORAGE_PATH" and isinstance(value, str):
                problems += check_storage(file, here, value)
            elif key == "value" and doc.get("name") == "RAYTF_STORAGE_PATH":
                problems += check_storage(file, here, str(value))
            elif key == "runtimeEnvYAML" and isinstance(value, str):
                problems += storage_and_placeholders(file, _yaml(value), here)
            else:
                problems += storage_and_placeholders(file, value, here)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            problems += storage_and_placeholders(file, value, f"{where}.{i}")
    elif isinstance(doc, str):
        storages = storage_in(doc)
        for storage in storages:
            problems += check_storage(file, where, storage)
        hole = placeholder_in(doc)
        if hole is not None and not any(hole in s for s in storages):
            problems.append(
                Problem(file, where, f"the placeholder {hole!r} is left in", PLACEHOLDER_FIX)
            )
    return problems


def _yaml(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # not YAML after all: its text is still read
