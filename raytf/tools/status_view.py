"""``raytf status RUN_DIR``: a run's state as an operator reads it, at a glance.

state.json answers "what is it doing now" for scripts; a person also asks
"how fast, how long still, where is each rank, what went wrong", which takes
the event log too. The view is one pure function of the two documents and
the clock, so every line of it is tested without a run.
"""

from __future__ import annotations

from typing import Any

from raytf.tools import run_records as rr

FAILURE_CAUSE_CHARS = 100  # one line each: the rank logs have the whole traceback
STALE_S = 30.0  # a running driver writes state.json about once a second: longer, it may be gone


def human_duration(seconds: float) -> str:
    """12 s, 5 min, 3 h, 2 d: the largest unit that gives at least 1, rounded down."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def one_line(text: Any, limit: int = FAILURE_CAUSE_CHARS) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _step_line(doc: dict, records: list[dict], now: float) -> str:
    step = doc.get("last_step")
    if step is None:
        step = rr.last_step(records)
    total = rr.total_steps(records)
    parts = [f"step {'-' if step is None else step}" + (f" / {total}" if total else "")]
    if total and step is not None:
        parts[0] += f" ({100.0 * step / total:.1f} %)"
    rate = rr.step_rate(records, doc.get("attempt"))
    if rate is not None:
        parts.append(f"{rate:.3g} steps/s")
        if total and step is not None and doc.get("state") == "RUNNING" and step < total:
            parts.append(f"ETA {human_duration((total - step) / rate)}")
    return ", ".join(parts)


def _time_line(doc: dict, records: list[dict], now: float) -> str:
    parts = []
    start = rr.first_time(records)
    updated = doc.get("updated") or None
    if start is not None:
        running = doc.get("state") == "RUNNING"
        end = now if running else (updated or now)  # since the run's first record
        parts.append(f"{'training' if running else 'trained'} for {human_duration(end - start)}")
    if updated:
        parts.append(f"state written {human_duration(now - updated)} ago")
        if doc.get("state") == "RUNNING" and now - updated > STALE_S:
            parts[-1] += " (is the driver still alive?)"
    if doc.get("driver_pid"):
        parts.append(f"driver pid {doc['driver_pid']}")
    return ", ".join(parts)


def _size_line(doc: dict) -> str:
    size = doc.get("world_size")
    line = f"world size {'-' if size is None else size}"
    low, high = doc.get("min_workers"), doc.get("num_workers")
    if low and high and low != high:
        line += f" (elastic {low}-{high})"
    return line


def _workers_more(doc: dict) -> str | None:
    """Past a size state.json lists the workers furthest behind: say how many are not."""
    total, listed = doc.get("workers_total"), len(doc.get("workers") or [])
    if not total or total <= listed:
        return None
    states = ", ".join(f"{n} {s}" for s, n in sorted((doc.get("workers_by_state") or {}).items()))
    return f"  ... the {listed} furthest behind of {total} workers ({states})"


def _total(doc: dict, key: str) -> int:
    """A list's whole count: state.json keeps only its newest entries."""
    return doc.get(f"{key}_total") or len(doc.get(key) or [])


def _workers_table(workers: list[dict]) -> list[str]:
    rows = [("rank", "node ip", "pid", "gpus", "state", "last step")]
    for w in sorted(workers, key=lambda w: w.get("rank", 0)):
        gpus = ",".join(str(g) for g in w.get("gpu_ids") or []) or "-"
        cells = (w.get("rank"), w.get("node_ip"), w.get("pid"), gpus, w.get("state"))
        rows.append(tuple("-" if c is None else str(c) for c in (*cells, w.get("last_step"))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(n) for c, n in zip(r, widths)).rstrip() for r in rows]


def _checkpoints_line(doc: dict) -> str:
    steps = doc.get("checkpoints") or []
    if not steps:
        return "checkpoints: none"
    return f"checkpoints: {len(steps)}, latest at step {max(steps)}"


def _failure_lines(failures: list[dict], total: int) -> list[str]:
    shown = f" (the last {len(failures)})" if total > len(failures) else ""
    lines = [f"failures: {total}{shown}"]
    for f in failures:
        step = f.get("step")
        where = f" at step {step}" if step is not None else ""
        what = f"attempt {f.get('attempt')}: {f.get('kind')}{where}"
        lines.append(f"  {what}: {one_line(f.get('cause', ''))}")
    return lines


def _resize_lines(resizes: list[dict], total: int) -> list[str]:
    lines = [f"resizes: {total}"]
    for r in resizes:
        lines.append(
            f"  attempt {r.get('attempt')}: {r.get('before')} -> {r.get('after')} workers "
            f"({r.get('reason')}), resumed from step {r.get('step')}"
        )
    return lines


def _preemption_lines(doc: dict) -> list[str]:
    log = doc.get("preemption_log") or []
    lines = [f"preemptions: {doc.get('preemptions') or len(log)}"]
    for entry in log:
        line = f"  node {entry.get('node_id')}: drain noticed"
        if entry.get("checkpoint_step") is not None:
            line += f", checkpoint at step {entry['checkpoint_step']} committed"
            spare = entry.get("seconds_to_spare")
            if spare is not None:
                line += f" {spare:.1f} s before the deadline"
        lines.append(line)
    return lines


def _startup_line(startup: dict) -> str | None:
    """The attempt's start-up phases in order, as seconds after the driver's process start."""
    phases = [
        (v, k)
        for k, v in startup.items()
        if k not in ("driver_started", "ranks") and isinstance(v, (int, float))
    ]
    if not phases:
        return None
    return "start-up: " + ", ".join(f"{k} {v:.1f} s" for v, k in sorted(phases))


def format_status(doc: dict, records: list[dict], now: float) -> str:
    """The human view of a run: ``doc`` its state.json, ``records`` its event log."""
    run_dir = doc.get("run_dir") or "RUN_DIR"
    lines = [
        f"run {doc.get('name', '?')}: {doc.get('state', '?')} (attempt {doc.get('attempt', 0)})",
        _step_line(doc, records, now),
    ]
    time_line = _time_line(doc, records, now)
    if time_line:
        lines.append(time_line)
    lines.append(_size_line(doc))
    if doc.get("workers"):
        lines.extend(_workers_table(doc["workers"]))
        more = _workers_more(doc)
        if more:
            lines.append(more)
    startup = _startup_line(doc.get("startup") or {})
    if startup:
        lines.append(startup)
    lines.append(_checkpoints_line(doc))
    if doc.get("failures"):
        lines.extend(_failure_lines(doc["failures"], _total(doc, "failures")))
    if doc.get("recoveries_s"):
        lines.append("recoveries: " + ", ".join(f"{s:.1f} s" for s in doc["recoveries_s"]))
    if doc.get("resizes"):
        lines.extend(_resize_lines(doc["resizes"], _total(doc, "resizes")))
    if doc.get("preemptions") or doc.get("preemption_log"):
        lines.extend(_preemption_lines(doc))
    lines.append(f"more: raytf logs {run_dir} [--rank R] [--follow]; raytf plot {run_dir}")
    return "\n".join(lines)
