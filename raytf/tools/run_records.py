"""Questions the operator's tools ask of a run's event log (``metrics.jsonl``).

``raytf status`` and ``raytf plot`` read the same records and must agree on
what "the current attempt", "the step rate" and "the step at that moment"
mean; answering them once, here, on plain lists of dicts, keeps both tools
free of I/O in their logic and testable with hand-made records.
"""

from __future__ import annotations

from typing import Any

Record = dict[str, Any]

TYPE_KEY = "type"  # the field naming a record's type (report, checkpoint, failure, ...)
RATE_WINDOW = 20  # reports the step rate is measured over: recent, yet not one noisy gap


def of_type(records: list[Record], kind: str) -> list[Record]:
    return [r for r in records if r.get(TYPE_KEY) == kind]


def stepped_reports(records: list[Record], rank: int | None = 0) -> list[Record]:
    """Reports that carry a step and a time, of one rank (all ranks for None), oldest first."""
    return [
        r
        for r in of_type(records, "report")
        if r.get("step") is not None
        and isinstance(r.get("time"), (int, float))
        and (rank is None or r.get("rank") == rank)
    ]


def current_attempt(records: list[Record], attempt: int | None) -> int | None:
    """``attempt`` (state.json's) when rank 0 reported in it, else the newest attempt reported."""
    attempts = {r.get("attempt") for r in stepped_reports(records)}
    if attempt in attempts:
        return attempt
    known = [a for a in attempts if isinstance(a, int)]
    return max(known) if known else None


def step_rate(records: list[Record], attempt: int | None) -> float | None:
    """Rank 0's steps per second over its last ``RATE_WINDOW`` reports of ``attempt``."""
    attempt = current_attempt(records, attempt)
    window = [r for r in stepped_reports(records) if r.get("attempt") == attempt]
    window = window[-RATE_WINDOW:]
    if len(window) < 2:
        return None
    steps = window[-1]["step"] - window[0]["step"]
    seconds = window[-1]["time"] - window[0]["time"]
    return steps / seconds if steps > 0 and seconds > 0 else None


def total_steps(records: list[Record]) -> int | None:
    """What the training loop last said it will run, or None when it never said."""
    totals = [r.get("value") for r in of_type(records, "total_steps")]
    totals = [t for t in totals if isinstance(t, (int, float))]
    return int(totals[-1]) if totals else None


def last_step(records: list[Record]) -> int | None:
    reports = stepped_reports(records)
    return int(reports[-1]["step"]) if reports else None


def step_at(records: list[Record], when: float) -> int | None:
    """Rank 0's last reported step at wall time ``when`` (None before its first report)."""
    step = None
    for r in stepped_reports(records):
        if r["time"] > when:
            break
        step = r["step"]
    return step


def first_time(records: list[Record]) -> float | None:
    times = [r["time"] for r in records if isinstance(r.get("time"), (int, float))]
    return min(times) if times else None
