"""The run's state on disk (``RUN_DIR/state.json``), for operators and tests.

Written by the driver at every state change (and about once a second while
running), atomically, so ``raytf status RUN_DIR`` always reads a whole
document, even mid-write or after the driver died. A driver restarted on the
same run directory continues its attempt count and failure list from here.

Its size is bounded, since it is rewritten every second for the whole run
(uploaded whole, on an object store): each list of events keeps its newest
``RECENT`` entries beside a ``<list>_total`` count (the full history is in
``metrics.jsonl``), and past ``WORKERS_LISTED`` workers ``workers`` lists the
ones furthest behind, with ``workers_total`` and ``workers_by_state``.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from raytf.rundir.paths import STATE_FILE
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")

RECENT = 20  # entries of each event list kept in state.json
WORKERS_LISTED = 64
_EVENT_LISTS = ("failures", "recoveries_s", "resumed_at", "preemption_log", "resizes")


@dataclass
class RunState:
    """The fields of ``RUN_DIR/state.json`` (``raytf status RUN_DIR --json`` prints it).

    Besides these, each event list (``failures``, ``recoveries_s``, ``resumed_at``,
    ``preemption_log``, ``resizes``) has a ``<list>_total`` count, since only its
    newest ``RECENT`` (20) entries are kept, and ``workers_total`` counts the workers;
    past ``WORKERS_LISTED`` (64) workers, ``workers`` lists the ones furthest behind,
    and ``workers_by_state`` counts them all by state.
    """

    name: str
    """The run's name (``RunConfig.name``)."""
    run_dir: str
    """The run directory: ``storage_path/name``, a path or a URL."""
    state: str = "SCHEDULING"
    """The driver's state: SCHEDULING, STARTING, RUNNING, RESTARTING, then FINISHED,
    ERRORED or STOPPED."""
    attempt: int = 0
    """The attempt running now: 1, plus one per restart (continued across drivers)."""
    num_workers: int = 0
    """The most workers (the max of an elastic range)."""
    min_workers: int = 0
    """The fewest workers an elastic run continues with (``num_workers`` if fixed)."""
    world_size: int | None = None
    """Workers in the current attempt."""
    driver_pid: int = field(default_factory=os.getpid)
    """The driver's process id."""
    workers: list[dict[str, Any]] = field(default_factory=list)
    """One object per rank: ``rank``, ``node_ip``, ``node_id``, ``pid``, ``port`` (its TF
    server), ``gpu_ids``, ``state`` and ``last_step``."""
    last_step: int | None = None
    """The last step rank 0 reported."""
    checkpoints: list[int] = field(default_factory=list)
    """The steps of the committed checkpoints kept."""
    failures: list[dict[str, Any]] = field(default_factory=list)
    """Each failure: ``attempt``, ``kind`` (``worker_died``, ``hang``, ``user_error``...),
    ``cause``, ``time`` and ``step`` (rank 0's last report before it)."""
    recoveries_s: list[float] = field(default_factory=list)
    """Each restart's seconds from the failure to the first resumed step."""
    resumed_at: list[float] = field(default_factory=list)
    """The wall time of each attempt's first resumed step."""
    preemptions: int = 0
    """Termination notices and drains handled (each a checkpoint and a restart, not a
    failure)."""
    preemption_log: list[dict[str, Any]] = field(default_factory=list)
    """Each drain or notice: its deadline and when its checkpoint was committed."""
    resizes: list[dict[str, Any]] = field(default_factory=list)
    """An elastic run's size changes."""
    startup: dict[str, Any] = field(default_factory=dict)
    """This attempt's start-up timeline: placed, TensorFlow imported, MWMS made, first
    step; each rank's under ``ranks`` (past 64 ranks, the 64 slowest; ``ranks_total``
    counts them all)."""
    updated: float = 0.0
    """When the driver last wrote the file (Unix time)."""

    @classmethod
    def continuing(cls, storage: Storage, *, name: str, run_dir: str, scaling) -> RunState:
        """A driver's state, continuing a previous driver's of the same run where one ran:
        attempts, failures, resizes and drains are the run's, not one driver's."""
        previous = load_previous(storage)
        state = cls(name=name, run_dir=run_dir, num_workers=scaling.max_workers)
        state.min_workers = scaling.min_workers
        for key in ("attempt", "failures", "resizes", "preemption_log"):
            if key in previous:
                setattr(state, key, previous[key])
        for key in ("failures", "resizes", "preemption_log"):
            held = len(previous.get(key) or [])
            state._earlier[key] = max(0, previous.get(f"{key}_total", held) - held)  # cut off
        return state

    def __post_init__(self) -> None:
        self._earlier: dict[str, int] = {}  # entries of a list no longer held, per list

    def document(self) -> dict[str, Any]:
        """What state.json holds: this state, bounded (the module's docstring). Copies
        only what it keeps (``asdict`` copied every worker: 0.1 s at 1,024, each second)."""
        doc: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "workers":
                doc.update(_workers(value))
                continue
            if f.name in _EVENT_LISTS:
                doc[f"{f.name}_total"] = self._earlier.get(f.name, 0) + len(value)
                value = value[-RECENT:]
            doc[f.name] = copy.deepcopy(value)
        return doc

    def add_failure(self, attempt: int, kind: str, cause: BaseException, at: float) -> None:
        """``step`` is the last step rank 0 reported before the failure: with the
        resumed step, it tells an operator how much work the failure cost."""
        self.failures.append(
            {
                "attempt": attempt,
                "kind": kind,
                "cause": f"{type(cause).__name__}: {cause}",
                "time": at,
                "step": self.last_step,
            }
        )

    def set_workers(self, infos: list, state: str) -> None:
        """One entry per rank: where it runs, so operators (and tests) can find it."""
        self.workers = [
            {
                "rank": info.rank,
                "node_ip": info.node_ip,
                "node_id": info.node_id,
                "pid": info.pid,
                "port": info.port,
                "gpu_ids": list(info.gpu_ids),
                "state": state,
                "last_step": None,
            }
            for info in infos
        ]

    def record(
        self,
        state: str,
        *,
        attempt: int,
        preemptions: int,
        workers_ended: bool,
        write: Callable[[dict], None],
    ) -> None:
        """The driver's state after each step of its loop, handed to ``write`` (the
        driver's ``StateWriter.put``) every time, except while running, then at most
        once a second (the loop turns every 0.2 s)."""
        self.state, self.attempt, self.preemptions = state, attempt, preemptions
        if workers_ended:
            for worker in self.workers:
                worker["state"] = "finished" if state == "FINISHED" else "stopped"
        if state != "RUNNING" or time.time() - self.updated >= 1.0:
            self.updated = time.time()
            write(self.document())


def _workers(workers: list[dict[str, Any]]) -> dict[str, Any]:
    """``workers`` (copies, the stragglers past ``WORKERS_LISTED``), ``workers_total`` and,
    past that many, ``workers_by_state``."""
    out: dict[str, Any] = {}
    listed = workers
    if len(workers) > WORKERS_LISTED:
        by_state: dict[str, int] = {}
        for w in workers:
            by_state[w["state"]] = by_state.get(w["state"], 0) + 1
        out["workers_by_state"] = by_state
        behind = sorted(workers, key=_behind)  # the stragglers
        listed = sorted(behind[:WORKERS_LISTED], key=lambda w: w["rank"])
    out["workers"] = copy.deepcopy(listed)
    out["workers_total"] = len(workers)
    return out


def _behind(worker: dict) -> tuple:
    """Sorts workers not started yet (no step) first, then by step, lowest first."""
    return (worker["last_step"] is not None, worker["last_step"] or 0)


def load_previous(storage: Storage) -> dict[str, Any]:
    """The state a previous driver of this run left, or {} for a new run. Only what has
    the types raytf writes is continued: a field damaged or written by hand is left out,
    with a warning naming the file, never a crash."""
    try:
        doc = storage.read_json(STATE_FILE)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        logger.warning("ignoring %s: %s", storage.url(STATE_FILE), exc)
        return {}
    if not isinstance(doc, dict):
        logger.warning("ignoring %s: not a JSON object", storage.url(STATE_FILE))
        return {}
    kept = {}
    for key, value in doc.items():
        want = _CONTINUED.get(key)
        if want is None or _typed(value, want):
            kept[key] = value
        else:
            logger.warning("ignoring %s's %r: %r is not %s", STATE_FILE, key, value, want[1])
    return kept


# What a continuing driver takes from state.json, and the type each must have.
_CONTINUED = {
    "attempt": (int, "a whole number"),
    "failures": (list, "a list of objects"),
    "resizes": (list, "a list of objects"),
    "preemption_log": (list, "a list of objects"),
    "failures_total": (int, "a whole number"),
    "resizes_total": (int, "a whole number"),
    "preemption_log_total": (int, "a whole number"),
}


def _typed(value: Any, want: tuple[type, str]) -> bool:
    kind = want[0]
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)
