"""Run directories as the tools read them: one run's state (``raytf status``), and
``raytf runs STORAGE_PATH``: which runs a storage path holds, the newest first.

An operator who comes back to a cluster knows the storage path, rarely the
run names. Each run directory already holds a whole state.json, so the list
costs one small read per run and needs neither Ray nor the driver. A run's
state is read here, not in ``raytf.rundir``, because showing it asks the
checkpoint layout which listed checkpoints are still there.
"""

from __future__ import annotations

from typing import Any

from raytf.checkpoint.layout import committed
from raytf.rundir.run_state import STATE_FILE
from raytf.rundir.storage import Storage
from raytf.tools.status_view import human_duration


def read_state(run_dir: str) -> dict[str, Any]:
    """A run's state.json (local path or URL), its checkpoint list cut to the checkpoints
    still there: one pruned or deleted after the driver wrote the list is not shown."""
    storage = Storage(run_dir)
    if not storage.exists(STATE_FILE):
        raise FileNotFoundError(storage.url(STATE_FILE))
    doc = storage.read_json(STATE_FILE)
    if not isinstance(doc, dict):
        raise ValueError(f"not a JSON object but {type(doc).__name__}")
    if isinstance(doc.get("checkpoints"), list) and doc["checkpoints"]:
        there = set(committed(storage))
        doc["checkpoints"] = [s for s in doc["checkpoints"] if s in there]
    return doc


def read_runs(storage: Storage) -> list[dict[str, Any]]:
    """Every subdirectory's state.json, newest first; one without it (or unreadable) is
    not a run, or not one yet."""
    docs = []
    for name in storage.listdir():
        if not storage.exists(name, STATE_FILE):
            continue
        try:
            doc = storage.read_json(name, STATE_FILE)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            doc.setdefault("name", name)
            doc.setdefault("run_dir", storage.url(name))
            docs.append(doc)
    return sorted(docs, key=lambda d: d.get("updated") or 0.0, reverse=True)


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """The fields ``raytf runs --json`` gives for each run."""
    keys = ("name", "run_dir", "state", "attempt", "last_step", "world_size", "updated")
    return {k: doc.get(k) for k in keys}


def format_runs(docs: list[dict[str, Any]], now: float) -> str:
    """A table of runs as given (``read_runs`` sorts them): name, state, attempt, step, age."""
    rows = [("name", "state", "attempt", "last step", "age")]
    for d in docs:
        age = human_duration(now - d["updated"]) if d.get("updated") else "-"
        cells = (d.get("name"), d.get("state"), d.get("attempt"), d.get("last_step"))
        rows.append((*("-" if c is None else str(c) for c in cells), age))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(n) for c, n in zip(r, widths)).rstrip() for r in rows)
