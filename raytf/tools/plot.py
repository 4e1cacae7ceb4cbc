"""``raytf plot RUN_DIR``: a run's curves, with its restarts and failures on them, as a PNG.

A loss curve alone hides what an operator needs to see on it: where a
failure cost steps, how long a restart took, whether one rank is slower.
Each metric is drawn twice, over steps (does the model learn across
restarts?) and over wall time (what did the restarts cost?). Matplotlib's
Agg backend writes the file without a screen, so this runs on a head node
over ssh; TensorFlow is never imported.
"""

from __future__ import annotations

import os

import matplotlib

from raytf.rundir.storage import is_local
from raytf.tools.plot_data import Marker, PlotData, Segment, time_unit

matplotlib.use("Agg")  # before anything imports pyplot: a head node has no screen

from matplotlib.figure import Figure  # noqa: E402 - after the backend is chosen
from matplotlib.lines import Line2D  # noqa: E402

MARKER_STYLE = {  # kind -> (colour, line style, width); checkpoints faint: there are many
    "restart": ("tab:green", "--", 1.4),
    "failure": ("tab:red", "-", 1.6),
    "resize": ("tab:purple", "-.", 1.4),
    "checkpoint": ("0.55", ":", 0.9),
}


def default_out(run_dir: str, name: str | None) -> str:
    """Beside the run when it is local, else in the working directory under the run's name."""
    if is_local(run_dir):
        return os.path.join(os.path.abspath(run_dir.removeprefix("file://")), "plot.png")
    return f"{name or run_dir.rstrip('/').rsplit('/', 1)[-1]}.png"


def _draw_segments(ax, segments: list[Segment], x: str, start: float, unit: float, **kw) -> None:
    label = kw.pop("label", None)
    for seg in segments:
        if x == "step":
            pts = [(s, v) for s, v in zip(seg.steps, seg.values) if s is not None]
        else:
            pts = [((t - start) / unit, v) for t, v in zip(seg.times, seg.values)]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, label=label, marker="." if len(pts) < 30 else None, **kw)
            label = None  # one legend entry per curve, not per attempt


def _draw_markers(ax, markers: list[Marker], x: str, start: float, unit: float) -> None:
    for m in markers:
        pos = m.step if x == "step" else (None if m.time is None else (m.time - start) / unit)
        if pos is None:
            continue
        colour, style, width = MARKER_STYLE[m.kind]
        ax.axvline(pos, color=colour, linestyle=style, linewidth=width, zorder=1)


def _clip_spikes(ax, segments_by_rank: dict[int, list[Segment]]) -> None:
    """A first step after a restart (tracing, warm-up) dwarfs the rest: keep it off-scale."""
    values = sorted(v for segs in segments_by_rank.values() for s in segs for v in s.values)
    if len(values) >= 10:
        typical = values[int(0.95 * (len(values) - 1))]
        if values[-1] > 3 * typical > 0:
            ax.set_ylim(0, 1.5 * typical)


def _legend_handles(data: PlotData) -> list[Line2D]:
    kinds = [k for k in MARKER_STYLE if any(m.kind == k for m in data.markers)]
    handles = []
    for kind in kinds:
        colour, style, width = MARKER_STYLE[kind]
        handles.append(Line2D([], [], color=colour, linestyle=style, linewidth=width, label=kind))
    return handles


def draw(data: PlotData, out: str, title: str) -> str:
    """Write the PNG: one row per metric (plus one of per-rank step times), steps on the
    left, wall time on the right; markers' legend below the panels, off the curves."""
    times = [t for segs in data.metrics.values() for s in segs for t in s.times]
    unit_name, unit = time_unit(max(times) - data.start if times else 0.0)
    rows = list(data.metrics.items())
    nrows = len(rows) + (1 if data.step_times else 0)
    fig = Figure(figsize=(13, 2.6 * nrows + 1.2), layout="constrained")
    axes = fig.subplots(nrows, 2, sharex="col", squeeze=False)
    for i, (name, segments) in enumerate(rows):
        for j, x in enumerate(("step", "time")):
            ax = axes[i][j]
            _draw_segments(ax, segments, x, data.start, unit, color=f"C{i}", linewidth=1.3)
            _draw_markers(ax, data.markers, x, data.start, unit)
            ax.set_ylabel(name)
            ax.grid(True, alpha=0.3)
    if data.step_times:
        for j, x in enumerate(("step", "time")):
            ax = axes[-1][j]
            for k, (rank, segments) in enumerate(data.step_times.items()):
                _draw_segments(
                    ax,
                    segments,
                    x,
                    data.start,
                    unit,
                    color=f"C{k}",
                    linewidth=1.0,
                    label=f"rank {rank}",
                )
            _draw_markers(ax, data.markers, x, data.start, unit)
            _clip_spikes(ax, data.step_times)
            ax.set_ylabel("seconds / step")
            ax.grid(True, alpha=0.3)
        axes[-1][1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    axes[0][0].set_title("over steps")
    axes[0][1].set_title("over wall time")
    axes[-1][0].set_xlabel("step")
    axes[-1][1].set_xlabel(f"time since the first record ({unit_name})")
    handles = _legend_handles(data)
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles))
    fig.suptitle(title)
    fig.savefig(out, dpi=100)
    return out
