"""Where a run's wall time went that did not train: goodput in lost-time categories.

Read off rank 0's reports, one per step (``{"step", "step_s", "t"}``: the step, its
time, the wall clock at its end), the times of the kills the bench sent, and the
run's start and end. A step reported again later was redone: its earlier reports
are lost work. Every second of the run is in exactly one category:

- ``useful_s``: the kept steps at their median time (the goodput's numerator: a
  step as it costs in steady state);
- ``slow_steps_s``: the kept steps beyond that median: saves' stalls, emergency
  copies, each attempt's first traced step, a slow spell of the machine;
- ``redone_s``: the steps whose work a kill threw away (their own times);
- ``restarts_s``: from each kill (or the end of the last step before it, when
  that came later) to the start of the first step after it: detecting the
  death, the emergency checkpoint, the restart, the restore (a kill before the
  first step counts as start-up);
- ``startup_s``: from ``fit()`` to the start of the first step;
- ``tail_s``: from the last step's end to ``fit()``'s return (the last commit,
  the group's shutdown);
- ``other_s``: the rest: the loop's own time between steps (reports, sleeps).
"""

from __future__ import annotations

import statistics


def _steps(history: list[dict]) -> list[dict]:
    return [m for m in history if "step_s" in m and "t" in m]


def downtimes(history: list[dict], kills: list[float]) -> list[float]:
    """Per kill: seconds from the kill to the end of the first step that started after
    it (the loop training again: a kill-to-training figure, the first step included)."""
    reports = _steps(history)
    out = []
    for k in kills:
        after = [r for r in reports if r["t"] - r["step_s"] >= k]
        if after:
            out.append(after[0]["t"] - k)
    return out


def breakdown(history: list[dict], kills: list[float]) -> list[dict]:
    """Per kill, where its downtime went, from the first report of the attempt after it
    (the bench's loop adds ``entered_t``, ``build_s``, ``restore_s`` to an attempt's
    first report): ``to_loop_s`` from the kill to the loop's entry (detection, the
    emergency checkpoint, the group's restart), ``build_s`` the model made in the
    strategy's scope (MWMS broadcasts its initial values), ``restore_s``, and
    ``first_step_s`` (its trace included)."""
    firsts = [r for r in _steps(history) if "entered_t" in r]
    out = []
    for k in kills:
        after = [r for r in firsts if r["entered_t"] >= k]
        if after:
            r = after[0]
            out.append(
                {
                    "to_loop_s": r["entered_t"] - k,
                    "build_s": r["build_s"],
                    "restore_s": r["restore_s"],
                    "first_step_s": r["step_s"],
                    "downtime_s": r["t"] - k,
                }
            )
    return out


def medians(rows: list[dict]) -> dict:
    """Each key's median over ``rows`` (dicts with the same keys)."""
    if not rows:
        return {}
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def lost_time(history: list[dict], kills: list[float], t0: float, t1: float) -> dict:
    """The categories above (seconds, and each as a per cent of the wall), for rank 0's
    reports ``history`` in order, kill times ``kills`` and the run's ``t0``..``t1``
    (all wall-clock epochs)."""
    reports = _steps(history)
    wall = t1 - t0
    if not reports or wall <= 0:
        return {"wall_s": wall}
    last_of: dict[int, int] = {}
    for i, r in enumerate(reports):
        last_of[r["step"]] = i
    kept = [reports[i] for i in sorted(last_of.values())]
    redone = [r for i, r in enumerate(reports) if last_of[r["step"]] != i]
    median = statistics.median(r["step_s"] for r in kept)
    restarts = 0.0
    for k in sorted(kills):
        # A step under way at the kill (rank 0 survives it) is its own category's.
        # A kill before the first step is start-up's.
        ends = [r["t"] for r in reports if r["t"] - r["step_s"] < k]
        after = [r["t"] - r["step_s"] for r in reports if r["t"] - r["step_s"] >= k]
        if after and ends:
            restarts += max(0.0, after[0] - max(k, *ends))
    out = {
        "wall_s": wall,
        "useful_s": len(kept) * median,
        "slow_steps_s": sum(r["step_s"] for r in kept) - len(kept) * median,
        "redone_s": sum(r["step_s"] for r in redone),
        "restarts_s": restarts,
        "startup_s": reports[0]["t"] - reports[0]["step_s"] - t0,
        "tail_s": t1 - reports[-1]["t"],
        "useful_step_s": median,
        "kept_steps": len(kept),
        "redone_steps": len(redone),
    }
    named = ("useful_s", "slow_steps_s", "redone_s", "restarts_s", "startup_s", "tail_s")
    out["other_s"] = wall - sum(out[k] for k in named)
    for key in (*named, "other_s"):
        out[key[: -len("_s")] + "_pct"] = 100.0 * out[key] / wall
    return out
