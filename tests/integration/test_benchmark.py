"""The benchmark job in smoke mode: every figure of every way is produced (durations positive).

Its own driver process with its own embedded Ray instance, as a user runs it
(the real, timed runs are ``make bench``, never a test). The suite runs raytf
and the hand-launched floor only: Ray Train's column (its start-up alone
~20 s) is the full benchmark's, which keeps the suite within its budget.
"""

import json
import math
import os
import statistics
import subprocess
import sys

import pytest

from .jobrun import ROOT

pytestmark = pytest.mark.slow

BASE = ("e2e_s", "first_step_s", "step_ms", "rss_mb")


def run_alone(args: list[str]) -> None:
    """A benchmark in its own driver process with its own embedded Ray instance (never
    the suite's cluster: RAY_ADDRESS dropped), as a user runs it; it must succeed."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_smoke_run_produces_every_figure_for_every_way(tmp_path):
    out, md = tmp_path / "figures.json", tmp_path / "bench.md"
    run_alone(
        [os.path.join(ROOT, "jobs", "benchmark.py"), "--smoke"]
        + ["--workloads", "mlp", "--ways", "raytf,mwms", "--json", str(out), "--out", str(md)]
        + ["--storage", str(tmp_path / "scratch")]
    )
    doc = json.loads(out.read_text())
    runs = doc["runs"]
    for way in ("raytf", "mwms"):
        (base,) = runs[f"mlp/{way}/base"]
        assert all(base[k] > 0 for k in BASE), (way, base)
        assert "report_ms" in base, way  # an excess over the median step: may be about 0
        assert base["digests_agree"], way
    (rec,) = runs["mlp/raytf/recovery"]  # smoke: it also gives the checkpoint figures
    assert rec["recovery_s"] > 0 and rec["digests_agree"], rec
    # Excesses over a median step: on the smoke's small model they may be about 0 either way.
    assert math.isfinite(rec["ckpt_excess_pct"]) and math.isfinite(rec["first_save_ms"]), rec
    assert not [k for k in runs if "raytrain" in k]
    (base,) = runs["mlp/raytf/base"]
    phases = base["startup"]  # seconds after fit() was called
    order = ["placed", "workers_strategy_created", "loops_started", "workers_first_step"]
    assert [phases[k] for k in order] == sorted(phases[k] for k in order), phases
    assert 0 < phases["workers_first_step"] < base["e2e_s"], phases
    summary = doc["summary"]["mlp"]
    assert summary["e2e_s"]["raytf/mwms"] > 0
    assert summary["recovery_s"]["raytf"] > 0
    assert [row["workers"] for row in doc["scale"]] == [2, 4]
    assert all(row["median"] > 0 and row["rounds"] > 0 for row in doc["scale"])
    text = md.read_text()
    assert "| end-to-end" in text and "Control plane" in text and "Machine:" in text
    assert "| TensorFlow imported (slowest) |" in text


def test_the_gpu_check_at_smoke_size_gives_every_figure(tmp_path):
    """``jobs/gpu_check.py --smoke`` on CPU, as the suite runs it until a GPU is lent: the
    emergency copy read on the variables' device, then ``raytf bench checkpoints`` (a
    tiny model, 2 workers): a pair of runs with the defaults and with protection off,
    two SIGKILLs in one run, each recovered through an emergency checkpoint with no step
    redone (the copy at every step), a goodput run with kills and its lost time by
    category, and the top-level keys; the real figures are in docs/benchmarks.md."""
    out = tmp_path / "check.json"
    run_alone(
        [os.path.join(ROOT, "jobs", "gpu_check.py"), "--smoke", "--emergency-every", "1"]
        + ["--storage", str(tmp_path / "runs"), "--json", str(out)]
    )
    doc = json.loads(out.read_text())
    device = doc["device_check"]
    assert device["device"] == "/CPU:0" and device["off_device"] == []
    assert device["copied_tensors"] >= 10 and device["step_ms"] > 0
    bench = doc["bench"]
    (cost,) = bench["cost"]
    assert cost["workload"] == "w2" and cost["pairs"] == 1 and cost["ci_pct"] is None
    runs = {r["arm"]: r for r in cost["pairs_runs"]}
    assert sorted(runs) == ["defaults", "off"]
    assert all(r["mean_step_s"] > 0 and r["wall_s"] > r["mean_step_s"] for r in runs.values())
    # Protection off commits nothing; the defaults' first timed save is 60 s away.
    assert runs["off"]["checkpoints"] is False
    (rec,) = bench["recovery"]
    assert rec["kills"] == 2 and len(rec["recoveries_s"]) == 2, rec
    assert all(r > 0 for r in rec["recoveries_s"]) and len(rec["downtimes_s"]) == 2
    assert rec["redone_steps"] == 0, rec  # the survivors' emergency checkpoints: nothing redone
    # Its kills come after step 20: each one's restart is lost time of its own category.
    assert rec["lost"]["restarts_s"] > 0 and rec["lost"]["redone_s"] == 0, rec["lost"]
    (good,) = bench["goodput"]
    assert good["store"] == "local" and good["kills"] >= 1 and 0 < good["goodput_pct"] <= 100
    lost = good["lost"]
    named = ("useful", "slow_steps", "redone", "restarts", "startup", "tail", "other")
    assert abs(sum(lost[f"{k}_s"] for k in named) - good["wall_s"]) < 1e-6 * good["wall_s"]
    # A kill a minute from the start: one before the first step is start-up's, not a restart.
    assert lost["startup_s"] > 0 and lost["restarts_s"] >= 0, lost
    # The top-level keys, exactly these names, from the parts that ran.
    assert bench["recovery_kills"] == 2
    assert bench["recovery_p50_s"] == statistics.median(rec["recoveries_s"])
    assert bench["recovery_p95_s"] == max(rec["recoveries_s"])
    assert bench["goodput_local"] == good["goodput_pct"] and bench["goodput_s3"] is None
    assert bench["cost_pct"] == cost["cost_pct"] and bench["cost_ci_pct"] is None


def test_the_control_plane_bench_past_64_ranks_writes_every_key(tmp_path):
    """``raytf bench control-plane`` at 130 simulated ranks (past 64: held polls, records
    in turn; the bench's own sizes are 4 to 1,024): every key of its row, one death and
    one restart, and what the run left bounded (state.json's lists, the record's share
    of the other ranks)."""
    out, storage = tmp_path / "cp.json", tmp_path / "scratch"
    run_alone(
        ["-m", "raytf.tools.cli", "bench", "control-plane", "--workers", "130"]
        + ["--steps", "1200", "--checkpoint-every", "300", "--json", str(out)]
        + ["--storage", str(storage)]
    )
    rows = json.loads(out.read_text())["results"]
    keys = ("round_ms_p50", "round_cpu_ms_p50", "start_s", "restart_s", "commit_ms")
    keys += ("state_json_bytes", "driver_rss_mb")
    assert [row["workers"] for row in rows] == [130]
    for row in rows:
        assert all(row[k] > 0 for k in keys), row
        assert row["attempts"] == 2 and row["commits"] >= 3, row  # one death, one restart
    state = json.loads((storage / "sim-130" / "state.json").read_text())
    assert state["state"] == "FINISHED" and state["last_step"] == 1200
    assert state["workers_total"] == 130 and len(state["workers"]) == 64
    assert state["startup"]["ranks_total"] == 130 and len(state["startup"]["ranks"]) == 64
    reports: dict[int, int] = {}
    with open(storage / "sim-130" / "metrics.jsonl") as f:
        for doc in map(json.loads, f):
            if doc["type"] == "report":
                reports[doc["rank"]] = reports.get(doc["rank"], 0) + 1
    assert len(reports) == 130 and reports[0] >= 12  # the chief's 12, and those redone
    assert sum(reports.values()) < 130 * 12  # the others' in turn (3 turns: about a third)
