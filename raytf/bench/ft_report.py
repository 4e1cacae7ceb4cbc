"""The benchmarks page's fault-tolerance section, written from ``raytf bench checkpoints
--json``'s figures: the page quotes what the JSON holds, with the date it was measured,
never a figure typed in by hand.

    raytf bench checkpoints --report FILE.json --out docs/benchmarks.md

replaces what lies between ``BEGIN`` and ``END`` in the page (the rest is kept).
"""

from __future__ import annotations

import json

from raytf.bench.report import write_between_markers

BEGIN, END = "<!-- bench-ft:begin -->", "<!-- bench-ft:end -->"

# The goals for the headline keys: (key, label, goal, goal met when...)
GOALS = (
    ("recovery_p50_s", "recovery, median (s)", 1.5, "le"),
    ("recovery_p95_s", "recovery, p95 (s)", 2.5, "le"),
    ("goodput_local", "goodput, local disk (%)", 95.0, "ge"),
    ("goodput_s3", "goodput, loopback S3 (%)", 90.0, "ge"),
    ("cost_pct", "the defaults' cost per step (%)", 2.0, "le"),
)
CATEGORIES = ("useful", "slow_steps", "redone", "restarts", "startup", "tail", "other")


def _num(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _met(value, goal: float, how: str) -> str:
    if value is None:
        return "not run"
    return "yes" if (value <= goal if how == "le" else value >= goal) else "no"


def render(figures: dict, measured: str) -> str:
    """Markdown: the headline against its goals, each recovery's breakdown, goodput's
    lost time by category, and the paired cost runs."""
    lines = [f"Measured {measured} (`raytf bench checkpoints`, written from its JSON).", ""]
    lines += ["| figure | measured | goal | met |", "| --- | --- | --- | --- |"]
    for key, label, goal, how in GOALS:
        value = figures.get(key)
        shown = _num(value)
        if key == "cost_pct" and value is not None and figures.get("cost_ci_pct") is not None:
            shown += f" +- {figures['cost_ci_pct']:.2f} (95 %)"
        lines.append(f"| {label} | {shown} | {goal:g} | {_met(value, goal, how)} |")
    lines.append(f"| recoveries measured | {figures.get('recovery_kills', 0)} | 20 | |")
    series = [r for r in figures.get("recovery", []) if r.get("breakdown_p50")]
    if series:
        b = series[0]["breakdown_p50"]
        lines += ["", "Where a recovery's seconds went (medians over the kills):", ""]
        lines += [
            "| kill to the loop's entry | the model built | restore | first step | downtime |"
        ]
        lines += ["| --- | --- | --- | --- | --- |"]
        parts = ("to_loop_s", "build_s", "restore_s", "first_step_s", "downtime_s")
        lines.append("| " + " | ".join(f"{b[p]:.2f} s" for p in parts) + " |")
    if figures.get("goodput"):
        lines += ["", "Goodput's wall time by category (per cent):", ""]
        lines += ["| store | kills | wall | " + " | ".join(CATEGORIES) + " |"]
        lines += ["| --- " * (len(CATEGORIES) + 3) + "|"]
        for g in figures["goodput"]:
            lost = g["lost"]
            cells = [f"{lost.get(c + '_pct', 0.0):.1f}" for c in CATEGORIES]
            lines.append(
                f"| {g.get('store', '-')} | {g['kills']} | {g['wall_s'] / 60:.1f} min | "
                + " | ".join(cells)
                + " |"
            )
    for cost in figures.get("cost", []):
        lines += ["", f"The defaults against protection off, `{cost['workload']}`:", ""]
        lines += ["| pair | defaults: mean step | off: mean step | cost |"]
        lines += ["| --- | --- | --- | --- |"]
        runs = {(r["pair"], r["arm"]): r for r in cost.get("pairs_runs", [])}
        for i, pct in enumerate(cost["pairs_pct"]):
            on, off = runs.get((i, "defaults"), {}), runs.get((i, "off"), {})
            lines.append(
                f"| {i + 1} | {_num(on.get('mean_step_s'), 3)} s | "
                f"{_num(off.get('mean_step_s'), 3)} s | {pct:+.1f} % |"
            )
    return "\n".join(lines) + "\n"


def write(json_path: str, out: str, measured: str) -> None:
    """The section from ``json_path``'s figures into ``out`` between the markers."""
    with open(json_path) as f:
        figures = json.load(f)
    write_between_markers(out, render(figures, measured), BEGIN, END)
