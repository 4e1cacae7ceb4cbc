"""What ``raytf plot`` draws, taken out of a run's records before anything is drawn.

Curves, restarts, failures, resizes and commits come from two documents
written by different processes at different moments; deciding what goes on
which axis (a failure's step is the last one rank 0 reported before it, a
restart's the step the new attempt resumed from) is the part that can be
wrong, so it is plain data here, tested without drawing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from raytf.tools import run_records as rr

MAX_METRICS = 4  # panels of reported metrics; more is unreadable on one page
NOT_METRICS = {"step"}  # a report's metrics carry its step: the x axis, not a curve


@dataclass
class Segment:
    """One attempt's points of one curve: a restart starts a new line, never joins it."""

    attempt: int | None
    steps: list[float | None] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # wall seconds
    values: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Marker:
    kind: str  # restart | failure | resize | checkpoint
    time: float | None  # wall seconds
    step: float | None
    label: str


@dataclass
class PlotData:
    start: float  # wall time of the first record: the time axis's zero
    metrics: dict[str, list[Segment]]
    step_times: dict[int, list[Segment]]  # rank -> seconds per step; empty below 2 ranks
    markers: list[Marker]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _rank_of_name(name: str) -> tuple[int, str]:
    low = name.lower()
    if "loss" in low:
        return (0, name)
    if "acc" in low:
        return (1, name)
    return (2, name)


def metric_names(reports: list[dict]) -> list[str]:
    """Rank 0's numeric metrics, loss-like first, then accuracy-like, at most MAX_METRICS."""
    names = {
        k
        for r in reports
        if r.get("rank") == 0
        for k, v in (r.get("metrics") or {}).items()
        if _is_number(v) and k not in NOT_METRICS
    }
    return sorted(names, key=_rank_of_name)[:MAX_METRICS]


def _segments(points: list[tuple[int | None, float | None, float, float]]) -> list[Segment]:
    """(attempt, step, time, value) points, in order, cut where the attempt changes."""
    segments: list[Segment] = []
    for attempt, step, when, value in points:
        if not segments or segments[-1].attempt != attempt:
            segments.append(Segment(attempt))
        seg = segments[-1]
        seg.steps.append(step)
        seg.times.append(when)
        seg.values.append(value)
    return segments


def metric_series(records: list[dict], name: str) -> list[Segment]:
    points = []
    for r in rr.of_type(records, "report"):
        value = (r.get("metrics") or {}).get(name) if name != "step" else r.get("step")
        if r.get("rank") == 0 and _is_number(value) and _is_number(r.get("time")):
            points.append((r.get("attempt"), r.get("step"), r["time"], float(value)))
    return _segments(points)


def step_times(records: list[dict]) -> dict[int, list[Segment]]:
    """Seconds per step between consecutive reports of each rank in one attempt, at the
    later report; {} unless two ranks or more reported steps (one has no one to lag)."""
    by_rank: dict[int, list[dict]] = {}
    for r in rr.stepped_reports(records, rank=None):
        by_rank.setdefault(r.get("rank"), []).append(r)
    if len(by_rank) < 2:
        return {}
    out = {}
    for rank, reports in sorted(by_rank.items()):
        points = []
        for a, b in zip(reports, reports[1:]):
            steps, seconds = b["step"] - a["step"], b["time"] - a["time"]
            if a.get("attempt") == b.get("attempt") and steps > 0 and seconds >= 0:
                points.append((b.get("attempt"), b["step"], b["time"], seconds / steps))
        out[rank] = _segments(points)
    return out


def _restart_markers(records: list[dict], doc: dict) -> list[Marker]:
    """Restart records, at the step each new attempt resumed from; a run from before the
    event log has only state.json's ``resumed_at``."""
    firsts: dict = {}
    for r in rr.stepped_reports(records):
        firsts.setdefault(r.get("attempt"), r["step"])
    restarts = rr.of_type(records, "restart")
    if restarts:
        return [
            Marker("restart", r.get("time"), firsts.get(r.get("attempt")), "restart")
            for r in restarts
        ]
    return [
        Marker("restart", t, rr.step_at(records, t), "restart") for t in doc.get("resumed_at") or []
    ]


def markers(records: list[dict], doc: dict) -> list[Marker]:
    found = _restart_markers(records, doc)
    for r in rr.of_type(records, "failure"):
        when = r.get("time")
        step = rr.step_at(records, when) if _is_number(when) else None
        found.append(Marker("failure", when, step, f"failure ({r.get('kind')})"))
    for r in doc.get("resizes") or []:
        if _is_number(r.get("at")):
            label = f"resize {r.get('before')} -> {r.get('after')}"
            found.append(Marker("resize", r["at"], r.get("step"), label))
    for r in rr.of_type(records, "checkpoint"):
        found.append(Marker("checkpoint", r.get("time"), r.get("step"), "checkpoint"))
    return found


def plot_data(records: list[dict], doc: dict) -> PlotData | None:
    """What to draw, or None when rank 0 never reported."""
    reports = [r for r in rr.of_type(records, "report") if r.get("rank") == 0]
    if not reports:
        return None
    names = metric_names(reports) or ["step"]  # nothing numeric reported: progress at least
    metrics = {name: metric_series(records, name) for name in names}
    metrics = {name: segs for name, segs in metrics.items() if segs}
    start = rr.first_time(records)
    if not metrics or start is None:
        return None
    return PlotData(start, metrics, step_times(records), markers(records, doc))


def time_unit(span_s: float) -> tuple[str, float]:
    """The wall-time axis's unit for a run this long: seconds, minutes or hours."""
    if not math.isfinite(span_s) or span_s < 600:
        return ("s", 1.0)
    return ("min", 60.0) if span_s < 3 * 3600 else ("h", 3600.0)
