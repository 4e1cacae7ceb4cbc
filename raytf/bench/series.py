"""``raytf bench checkpoints --recovery-kills N``: N recoveries in one run, for a median
and a p95 (one kill gives one figure, and a recovery's spread on 2 shared cores is a
second), with each recovery's breakdown (``raytf.bench.lost_time.breakdown``)."""

from __future__ import annotations

import os
import statistics

from raytf.bench import headline, lost_time


def run(args, kill_at: int, median: float, one_run) -> dict:
    """``--recovery-kills`` SIGKILLs of rank 1 in one run, one every ``--recovery-gap``
    seconds once the run has recovered from the one before: each recovery's seconds
    (restart start to the first resumed step) and downtime (kill to the first step's
    end). Standbys are asked for 2 s into each attempt (``RAYTF_STANDBY_AFTER_S``;
    30 s by default), so each kill finds them imported, as a kill in a long run does:
    a kill every 20 s would otherwise always find none. ``one_run``:
    ``checkpoints.one_run``."""
    n = args.recovery_kills
    steps = kill_at + int(n * args.recovery_gap / median) + 20
    saved = os.environ.get("RAYTF_STANDBY_AFTER_S")
    os.environ["RAYTF_STANDBY_AFTER_S"] = "2"
    try:
        figs = one_run(
            args,
            "async+emergency",
            kill_at=kill_at,
            kill_every=args.recovery_gap,
            kill_limit=n,
            steps=steps,
        )
    finally:
        if saved is None:
            os.environ.pop("RAYTF_STANDBY_AFTER_S", None)
        else:
            os.environ["RAYTF_STANDBY_AFTER_S"] = saved
    rec = sorted(figs["recoveries_s"])
    figs["recovery_p50_s"] = statistics.median(rec) if rec else None
    figs["recovery_p95_s"] = headline.p95(rec)
    figs["downtime_p50_s"] = statistics.median(figs["downtimes_s"] or [0.0])
    figs["breakdown_p50"] = lost_time.medians(figs["breakdowns"])
    figs["redone_steps"] = figs["lost"].get("redone_steps")
    return figs
