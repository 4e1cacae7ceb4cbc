"""The benchmark's pure parts: figures from trace files, medians, ratios, the table, the plan."""

import json
import os

from raytf.bench import harness, report
from raytf.bench.main import parse_args, plan, write_between_markers


def _trace(tmp_path, rank, events):
    with open(os.path.join(tmp_path, f"rank{rank}.jsonl"), "w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")


def _run(tmp_path, step_s, after=0, killed=False):
    t0 = 1000.0
    for rank in (0, 1):
        events = [{"event": "start", "pid": 10 + rank, "after": 0, "t": t0 + 5}]
        events.append({"event": "step", "step": 1, "pid": 10 + rank, "t": t0 + 6})
        if killed:
            events.append({"event": "start", "pid": 20 + rank, "after": after, "t": t0 + 9})
            events.append({"event": "step", "step": after + 1, "pid": 20 + rank, "t": t0 + 10})
        end = {
            "event": "end",
            "t": t0 + 12,
            "after": after,
            "step_s": step_s,
            "rss_mb": 800.0 + rank,
        }
        events.append({**end, "loss": 0.5, "weights_digest": "d", "steps": len(step_s) + after})
        events.append({"event": "returned", "t": t0 + 12.5})
        _trace(tmp_path, rank, events)
    return t0


def test_figures_come_from_the_chiefs_trace_and_every_ranks_memory(tmp_path):
    step_s = [0.5] + [0.01] * 99
    t0 = _run(tmp_path, step_s)
    figs = harness.figures(str(tmp_path), 2, t0, t0 + 13)
    assert figs["e2e_s"] == 13 and figs["first_step_s"] == 6
    assert abs(figs["step_ms"] - 10.0) < 1e-9  # the first, slow step is warm-up
    assert figs["rss_mb"] == 801.0 and figs["digests_agree"]
    assert figs["return_s"] == 0.5 and figs["wind_down_s"] == 0.5


def test_checkpoint_excess_counts_the_later_saving_steps_beyond_a_median_step(tmp_path):
    step_s = [0.01] * 150
    step_s[49] = 0.08  # step 50: the first save (step k's time is step_s[k - 1])
    for s in (100, 150):
        step_s[s - 1] = 0.03
    t0 = _run(tmp_path, step_s)
    figs = harness.figures(str(tmp_path), 2, t0, t0 + 13, every=50)
    loop = sum(step_s[harness.WARMUP_STEPS :])
    assert abs(figs["ckpt_excess_pct"] - 100 * 0.04 / loop) < 1e-9
    assert abs(figs["first_save_ms"] - 70.0) < 1e-9


def test_recovery_runs_from_the_kill_to_the_first_step_after_it(tmp_path):
    t0 = _run(tmp_path, [0.01] * 60, after=100, killed=True)
    figs = harness.figures(str(tmp_path), 2, t0, t0 + 13, killed_at=t0 + 8)
    assert figs["recovery_s"] == 2 and figs["resumed_after"] == 100


def test_ratios_medians_and_a_missing_way_reads_n_a():
    runs = {
        ("mlp", "raytf", "base"): [{"e2e_s": 10.0, "loop_s": 4.0}, {"e2e_s": 12.0, "loop_s": 4.0}],
        ("mlp", "raytf", "ckpt"): [{"loop_s": 4.1}],
        ("mlp", "mwms", "base"): [{"e2e_s": 11.0}],
    }
    s = report.summary(runs, "mlp")
    assert s["e2e_s"]["raytf"] == 11.0 and s["e2e_s"]["raytf/mwms"] == 1.0
    assert s["e2e_s"]["raytf/raytrain"] is None
    assert abs(s["ckpt_overhead_pct"]["raytf"] - 2.5) < 1e-9
    rows = report.table(runs, "mlp")
    e2e = next(r for r in rows if r.startswith("| end-to-end"))
    assert "| 11.0 (10.0-12.0) | 11.0 | n/a | 1.00 | n/a |" in e2e
    assert not any(r.startswith("| recovery") for r in rows)  # no way measured it


def test_the_plan_interleaves_ways_and_gives_the_floor_no_checkpoint_or_recovery_runs():
    kinds = [(w, k) for _, w, k, _ in plan(parse_args(["--workloads", "mlp"]))]
    assert kinds[:3] == [("raytf", "base"), ("mwms", "base"), ("raytrain", "base")]
    assert ("mwms", "ckpt") not in kinds and ("mwms", "recovery") not in kinds
    assert ("raytrain", "recovery") in kinds and ("raytf", "recovery") in kinds
    assert all(k != "recovery" for _, _, k, _ in plan(parse_args(["--no-recovery"])))


def test_the_table_replaces_only_what_is_between_the_markers(tmp_path):
    path = tmp_path / "b.md"
    path.write_text(
        "# Benchmarks\n\nintro\n\n<!-- bench:begin -->\nold\n<!-- bench:end -->\n\nnotes\n"
    )
    write_between_markers(str(path), "new table\n")
    text = path.read_text()
    assert "old" not in text and "new table" in text
    assert text.startswith("# Benchmarks\n\nintro") and text.rstrip().endswith("notes")
    fresh = tmp_path / "fresh.md"
    write_between_markers(str(fresh), "t\n")
    assert fresh.read_text().startswith("# Benchmarks")
