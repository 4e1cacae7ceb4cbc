"""Medians, ratios and the Markdown table: pure functions of the measured runs.

``runs`` maps (workload, way, kind) to the list of figure dicts of its
repeats, kind being ``base`` (no checkpoints), ``ckpt`` (one checkpoint every
N steps) or ``recovery`` (checkpoints and one SIGKILL). Each cell shows the
median and, with several repeats, the range, so noise is visible next to
the figure it blurs.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from typing import Any

WAYS = ("raytf", "mwms", "raytrain")
WAY_NAMES = {"raytf": "raytf", "mwms": "hand-launched MWMS", "raytrain": "Ray Train"}

# (figure key, kind of run it comes from, label, unit format)
ROWS = [
    ("e2e_s", "base", "end-to-end, `fit()` to result (s)", "{:.1f}"),
    ("first_step_s", "base", "time to first step (s)", "{:.1f}"),
    ("step_ms", "base", "steady-state step (ms)", "{:.1f}"),
    ("report_ms", "base", "cost of one metrics report to the loop (ms)", "{:.1f}"),
    ("recovery_s", "recovery", "recovery after SIGKILL of a worker (s)", "{:.1f}"),
    ("ckpt_overhead_pct", "ckpt", "checkpoint overhead: loop time with / without (%)", "{:.1f}"),
    (
        "ckpt_excess_pct",
        "recovery",
        "checkpoint overhead: later saves' excess, long run (%)",
        "{:.1f}",
    ),
    ("first_save_ms", "ckpt", "an attempt's first save, beyond a step (ms)", "{:.0f}"),
    ("rss_mb", "base", "peak memory per worker (MiB)", "{:.0f}"),
]
TARGETS = {
    "e2e_s": "raytf <= 1.10 x MWMS and <= 0.60 x Ray Train",
    "step_ms": "raytf <= 1.02 x MWMS",
    "recovery_s": "raytf <= 5 s",
    "ckpt_overhead_pct": "raytf <= 3 %",
    "ckpt_excess_pct": "raytf <= 3 %",
}


def values(runs: dict, workload: str, way: str, key: str, kind: str) -> list[float]:
    if key == "ckpt_overhead_pct":
        base = values(runs, workload, way, "loop_s", "base")
        ckpt = values(runs, workload, way, "loop_s", "ckpt")
        if not base or not ckpt:
            return []
        # One figure from the medians: runs are not paired, their noise is.
        return [100 * (statistics.median(ckpt) / statistics.median(base) - 1)]
    return [r[key] for r in runs.get((workload, way, kind), []) if key in r]


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def cell(xs: list[float], fmt: str) -> str:
    if not xs:
        return "n/a"
    text = fmt.format(statistics.median(xs))
    if len(xs) > 1:
        text += f" ({fmt.format(min(xs))}-{fmt.format(max(xs))})"
    return text


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}"


def summary(runs: dict, workload: str) -> dict[str, dict[str, Any]]:
    """Median of every figure for every way, and raytf's ratios: the closing note's numbers."""
    out: dict[str, dict[str, Any]] = {}
    for key, kind, _, _ in ROWS:
        med = {way: median(values(runs, workload, way, key, kind)) for way in WAYS}
        out[key] = {
            **med,
            "raytf/mwms": None
            if not (med["raytf"] and med["mwms"])
            else med["raytf"] / med["mwms"],
            "raytf/raytrain": (
                None if not (med["raytf"] and med["raytrain"]) else med["raytf"] / med["raytrain"]
            ),
        }
    return out


def table(runs: dict, workload: str) -> list[str]:
    lines = [
        "| figure | raytf | hand-launched MWMS | Ray Train | raytf / MWMS | raytf / Ray Train "
        "| target |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key, kind, label, fmt in ROWS:
        xs = {way: values(runs, workload, way, key, kind) for way in WAYS}
        if not any(xs.values()):
            continue
        meds = {way: median(v) for way, v in xs.items()}
        lines.append(
            f"| {label} | {cell(xs['raytf'], fmt)} | {cell(xs['mwms'], fmt)} "
            f"| {cell(xs['raytrain'], fmt)} | {ratio(meds['raytf'], meds['mwms'])} "
            f"| {ratio(meds['raytf'], meds['raytrain'])} | {TARGETS.get(key, '')} |"
        )
    return lines


def scale_lines(rows: list[dict]) -> list[str]:
    lines = [
        "| workers | driver CPU per round, median (ms) | round wall time, median / p90 (ms) "
        "| rounds | x workers | x driver CPU | x round wall | run wall (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['workers']} | {r['cpu_median']:.1f} | {r['median']:.1f} / {r['p90']:.1f} "
            f"| {r['rounds']} | {r['size_ratio']:.1f} | {r['cpu_ratio']:.2f} "
            f"| {r['round_ratio']:.2f} | {r['wall_s']:.1f} |"
        )
    return lines


def machine() -> str:
    """One line on what the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    mem = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        mem = f", {pages / 2**30:.0f} GiB memory"
    except (ValueError, OSError):
        pass
    gpus = "no GPU"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if out.returncode == 0 and out.stdout.strip():
            names = out.stdout.strip().splitlines()
            gpus = f"{len(names)} x {names[0]}"
    except (OSError, subprocess.TimeoutExpired):
        pass
    return f"{os.cpu_count()} CPU cores ({cpu}){mem}, {gpus}, {platform.platform()}"


def versions() -> str:
    import importlib.metadata as md

    parts = [f"Python {platform.python_version()}"]
    for dist in ("tensorflow-cpu", "tensorflow", "keras", "ray"):
        try:
            parts.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            continue
    return ", ".join(parts)


# The start-up phases, in order, as the bench reports them (raytf's base runs).
STARTUP_ROWS = (
    ("scheduling", "driver set up (placement group asked for)"),
    ("placed", "placed"),
    ("workers_process_start", "worker processes started (slowest)"),
    ("workers_tf_imported", "TensorFlow imported (slowest)"),
    ("actors_ready", "actors ready"),
    ("workers_strategy_created", "MWMS created (slowest)"),
    ("loops_started", "loops started"),
    ("workers_first_step", "first step finished (slowest)"),
)


def startup_lines(runs: dict, workload: str) -> list[str]:
    """Median seconds from ``fit()`` to each start-up phase of raytf's plain runs; a
    phase before 0 happened before ``fit()`` (Ray's pre-started worker processes)."""
    timelines = [r["startup"] for r in runs.get((workload, "raytf", "base"), []) if "startup" in r]
    if not timelines:
        return []
    lines = ["| phase | seconds after fit() (median) |", "| --- | --- |"]
    for key, label in STARTUP_ROWS:
        xs = [t[key] for t in timelines if key in t]
        if xs:
            lines.append(f"| {label} | {cell(xs, '{:.2f}')} |")
    return lines


BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def write_between_markers(path: str, text: str, begin: str = BEGIN, end: str = END) -> None:
    body = f"{begin}\n{text}{end}\n"
    old = ""
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        tail = rest.split(end, 1)[1].lstrip("\n")
        new = head + body + ("\n" + tail if tail else "")
    else:
        new = (old + "\n" if old else "# Benchmarks\n\n") + body
    with open(path, "w") as f:
        f.write(new)
