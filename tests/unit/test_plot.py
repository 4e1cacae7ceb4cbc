"""``raytf plot``: what goes on which axis (pure), and a real PNG drawn from synthetic records."""

import json

import pytest

from raytf.tools.cli import main
from raytf.tools.plot import default_out
from raytf.tools.plot_data import metric_names, plot_data, step_times, time_unit

from .records import report

pytestmark = pytest.mark.unit


def synthetic_run():
    """Two ranks; attempt 0 to step 130, a failure, a restart resuming at step 100."""
    recs = [{"type": "total_steps", "time": 0.0, "value": 300}]
    for attempt, steps, t0 in ((0, range(0, 140, 2), 0.0), (1, range(100, 300, 2), 200.0)):
        for i, s in enumerate(steps):
            when = t0 + 0.5 * i
            loss = 2.0 * 0.99**s
            recs.append(report(s, when, 0, attempt, loss=loss, accuracy=1 - loss / 2, name="x"))
            recs.append(report(s, when + 0.1 * (i % 3), 1, attempt))
            if s % 50 == 0 and s:
                recs.append({"type": "checkpoint", "time": when + 0.2, "step": s, "path": "p"})
        if attempt == 0:
            recs.append(
                {
                    "type": "failure",
                    "time": t0 + 70.0,
                    "attempt": 0,
                    "kind": "worker_died",
                    "error": "WorkerDiedError: rank 1",
                }
            )
            recs.append({"type": "restart", "time": 190.0, "attempt": 1})
    return recs


STATE = {
    "name": "synthetic",
    "state": "FINISHED",
    "resumed_at": [200.0],
    "resizes": [
        {"attempt": 1, "before": 2, "after": 2, "reason": "x", "step": 100, "at": 195.0},
        {"attempt": 2, "before": 2, "after": 1, "step": 1},
    ],
}


def test_metrics_loss_like_first_numbers_only_at_most_four():
    reports = [
        report(1, 1.0, b_acc=0.5, zeta=1, a=2, loss=3.0, val_loss=4.0, flag=True, note="text")
    ]
    reports[0]["metrics"]["step"] = 1  # the recorder puts it there: the x axis, not a curve
    assert metric_names(reports) == ["loss", "val_loss", "b_acc", "a"]
    assert metric_names([report(1, 1.0, rank=1, loss=1.0)]) == []


def test_series_split_by_attempt_and_markers_on_both_axes():
    data = plot_data(synthetic_run(), STATE)
    assert list(data.metrics) == ["loss", "accuracy"]
    loss = data.metrics["loss"]
    assert [s.attempt for s in loss] == [0, 1]
    assert loss[1].steps[0] == 100 and loss[0].steps[-1] == 138
    kinds = [(m.kind, m.step) for m in data.markers]
    assert ("restart", 100) in kinds  # the step attempt 1 resumed from
    assert ("failure", 138) in kinds  # the last step rank 0 reported before it
    assert ("resize", 100) in kinds  # the one without a time is left out
    assert sum(k == "resize" for k, _ in kinds) == 1
    assert sum(k == "restart" for k, _ in kinds) == 1  # records win over resumed_at
    assert sorted(s for k, s in kinds if k == "checkpoint") == [50, 100, 100, 150, 200, 250]
    assert data.start == 0.0


def test_resumed_at_marks_restarts_when_the_log_has_none():
    recs = [r for r in synthetic_run() if r["type"] != "restart"]
    restarts = [m for m in plot_data(recs, STATE).markers if m.kind == "restart"]
    assert [(m.time, m.step) for m in restarts] == [(200.0, 100)]


def test_step_times_need_two_ranks():
    recs = synthetic_run()
    times = step_times(recs)
    assert sorted(times) == [0, 1]
    assert times[0][0].values[0] == pytest.approx(0.25)  # 2 steps in 0.5 s
    assert all(v >= 0 for segs in times.values() for s in segs for v in s.values)
    assert step_times([r for r in recs if r.get("rank") != 1]) == {}


def test_no_reports_nothing_to_plot():
    assert plot_data([{"type": "restart", "time": 1.0, "attempt": 1}], {}) is None
    steps_only = plot_data([report(1, 1.0), report(2, 2.0)], {})
    assert list(steps_only.metrics) == ["step"]


@pytest.mark.parametrize("span, unit", [(10, "s"), (900, "min"), (5 * 3600, "h")])
def test_time_unit(span, unit):
    assert time_unit(span)[0] == unit


def test_plot_writes_a_png(tmp_path, capsys):
    run = tmp_path / "synthetic"
    run.mkdir()
    (run / "state.json").write_text(json.dumps(STATE))
    lines = [json.dumps(r) for r in synthetic_run()]
    (run / "metrics.jsonl").write_text("\n".join(lines) + '\n{"type": "rep')
    assert main(["plot", str(run)]) == 0
    out = run / "plot.png"
    assert capsys.readouterr().out.strip() == str(out)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000
    other = tmp_path / "elsewhere.png"
    assert main(["plot", str(run), "--out", str(other)]) == 0
    assert other.read_bytes()[:4] == b"\x89PNG"


def test_plot_without_reports(tmp_path, capsys):
    (tmp_path / "state.json").write_text(json.dumps({"name": "empty", "state": "RUNNING"}))
    assert main(["plot", str(tmp_path)]) == 2
    assert "nothing to plot" in capsys.readouterr().err


def test_default_out_beside_a_local_run_else_here(tmp_path):
    assert default_out(str(tmp_path), "r") == str(tmp_path / "plot.png")
    assert default_out("s3://bucket/runs/digits", "digits") == "digits.png"
    assert default_out("s3://bucket/runs/digits/", None) == "digits.png"
