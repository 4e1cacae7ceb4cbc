"""The run's event log (``RUN_DIR/metrics.jsonl``) and its per-rank output (``RUN_DIR/logs/``).

``state.json`` is the run's state now; this is what happened, in order, one
JSON object a line, so ``raytf status``, ``raytf plot`` and a user's own
script read a run without Ray and without TensorFlow. The driver appends to
it (``raytf.observe``); a partial last line (a driver killed mid-write) is
skipped by the reader. Record types, each with ``time`` (wall seconds):

- ``report``: ``rank``, ``attempt``, ``step`` (or null), ``metrics``, ``examples``; every rank's
- ``checkpoint``: ``step``, ``path``, ``commit_s`` (the driver's time for it): a commit
- ``failure``: ``attempt``, ``kind``, ``error``
- ``restart``: ``attempt`` (the new attempt's number)
- ``total_steps``: ``value``: what the loop said it will run (``set_total_steps``)
- ``end``: ``state`` (FINISHED, ERRORED, STOPPED)

Each rank's whole output (TensorFlow's start-up notes included, which the
driver's screen leaves out) goes to ``logs/rank_<R>.log``, continued across
attempts with a header line per attempt. On an object store each file is a
series of segments (``raytf.rundir.segments``); read them through it.
"""

from __future__ import annotations

import json
from typing import Any

from raytf.rundir import segments
from raytf.rundir.storage import Storage

RUN_LOG = "metrics.jsonl"
LOGS_DIR = "logs"
TENSORBOARD_DIR = "tensorboard"


def rank_log_name(rank: int) -> str:
    return f"rank_{rank}.log"


def parse_records(text: str) -> list[dict[str, Any]]:
    """Every whole record; a line that does not parse (a write cut short) is skipped."""
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            records.append(doc)
    return records


def read_run_log(run_dir: str | Storage) -> list[dict[str, Any]]:
    """A run's records, oldest first; [] for a run that has none (yet, or from before)."""
    storage = run_dir if isinstance(run_dir, Storage) else Storage(run_dir)
    if not segments.exists(storage, RUN_LOG):
        return []
    return parse_records(segments.read(storage, RUN_LOG).decode("utf-8", errors="replace"))
