"""The top-level figures of ``raytf bench checkpoints --json``: what scripts outside
the project read, by exactly these names (``KEYS``), from the parts that ran.

- ``recovery_p50_s`` / ``recovery_p95_s``: seconds from a restart's start to its
  first resumed step (``Result.recoveries_s``), over ``recovery_kills`` SIGKILLs
  (the ``--recovery-kills`` series, else every recovery run's);
- ``goodput_local`` / ``goodput_s3``: per cent of the wall time spent on kept
  steps at their median time, a SIGKILL every ``--kill-every`` seconds, on local
  disk and through the S3 store (``raytf.bench.lost_time``);
- ``cost_pct`` / ``cost_ci_pct``: the defaults' cost per step against protection off,
  per cent, and the half-width of its 95 % interval, from paired runs of the W2
  model (``raytf.bench.cost``; the first workload measured when W2 was not).

A part that did not run gives None.
"""

from __future__ import annotations

import statistics

KEYS = (
    "recovery_p50_s",
    "recovery_p95_s",
    "recovery_kills",
    "goodput_local",
    "goodput_s3",
    "cost_pct",
    "cost_ci_pct",
)


def p95(values: list[float]) -> float | None:
    """The 95th percentile, nearest rank (of 20 values: the 19th)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


def headline(figures: dict) -> dict:
    """The top-level keys scripts outside the project read (exactly these names), from
    the parts that ran; None where a part did not run."""
    series = [r for r in figures["recovery"] if "recovery_p50_s" in r]
    recs = [x for r in figures["recovery"] for x in r["recoveries_s"]]
    good = {g.get("store"): g["goodput_pct"] for g in figures["goodput"]}
    w2 = next((c for c in figures["cost"] if c["workload"] == "w2"), None)
    w2 = w2 or (figures["cost"][0] if figures["cost"] else None)
    return {
        "recovery_p50_s": series[0]["recovery_p50_s"] if series else _median(recs),
        "recovery_p95_s": series[0]["recovery_p95_s"] if series else p95(recs),
        "recovery_kills": len(recs),
        "goodput_local": good.get("local"),
        "goodput_s3": good.get("s3"),
        "cost_pct": w2["cost_pct"] if w2 else None,
        "cost_ci_pct": w2["ci_pct"] if w2 else None,
    }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
