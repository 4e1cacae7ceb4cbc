"""``raytf bench checkpoints``'s pure parts: paired costs with their interval, the lost
time of a run with kills by category, and the top-level keys scripts read."""

import json
import math

import pytest

from raytf.bench import headline, lost_time, paired
from raytf.bench.checkpoints_cli import parse_args

pytestmark = pytest.mark.unit


def test_a_paired_cost_is_the_mean_of_the_pairs_ratios_with_a_t_interval():
    # Pairs that share each slow spell: the ratio stays near 2 % while the arms swing 20 %.
    pairs = [(1.02, 1.0), (1.224, 1.2), (0.918, 0.9), (1.122, 1.1)]
    out = paired.cost_pct(pairs)
    assert out["pairs"] == 4
    assert out["pairs_pct"] == pytest.approx([2.0, 2.0, 2.0, 2.0])
    assert out["cost_pct"] == pytest.approx(2.0)
    assert out["ci_pct"] == pytest.approx(0.0, abs=1e-9)
    spread = paired.cost_pct([(1.01, 1.0), (1.03, 1.0), (1.05, 1.0)])
    # mean 3 %, stdev 2 points, t(2) = 4.303: 4.303 * 2 / sqrt(3).
    assert spread["cost_pct"] == pytest.approx(3.0)
    assert spread["ci_pct"] == pytest.approx(4.303 * 2 / math.sqrt(3))
    assert paired.cost_pct([(1.1, 1.0)])["ci_pct"] is None  # one pair: no interval


def test_t_quantiles_and_the_alternating_order():
    assert paired.t95(1) == 12.706 and paired.t95(9) == 2.262 and paired.t95(100) == 1.96
    with pytest.raises(ValueError):
        paired.t95(0)
    with pytest.raises(ValueError):
        paired.cost_pct([(1.0, 0.0)])
    firsts = [paired.order(i)[0] for i in range(4)]
    assert firsts == ["treated", "base", "treated", "base"]


def _reports(steps, start, step_s=1.0):
    out, t = [], start
    for s in steps:
        t += step_s
        out.append({"step": s, "step_s": step_s, "t": t})
    return out


def test_lost_time_puts_every_second_in_one_category():
    # fit() at 0; the first step starts at 5; steps 1-10 take 1 s each (to t=15); rank 1
    # is killed at 15.5; steps 9-10 are redone from t=20 (the restart: 15.5 -> 20);
    # steps 9-20 end at t=32; fit() returns at 34.
    history = _reports(range(1, 11), 5.0) + _reports(range(9, 21), 20.0)
    history[3]["step_s"] = 1.5  # a save's stall: a slow kept step...
    history[3]["t"] += 0.5  # ...which ends later (the reports after it keep their t)
    out = lost_time.lost_time(history, kills=[15.5], t0=0.0, t1=34.0)
    assert out["kept_steps"] == 20 and out["redone_steps"] == 2
    assert out["useful_step_s"] == 1.0 and out["useful_s"] == 20.0
    assert out["slow_steps_s"] == pytest.approx(0.5)
    assert out["redone_s"] == 2.0
    assert out["restarts_s"] == pytest.approx(4.5)
    assert out["startup_s"] == 5.0 and out["tail_s"] == 2.0
    named = ("useful", "slow_steps", "redone", "restarts", "startup", "tail", "other")
    assert sum(out[f"{k}_s"] for k in named) == pytest.approx(34.0)
    assert out["useful_pct"] == pytest.approx(100 * 20 / 34)
    assert lost_time.downtimes(history, [15.5]) == [pytest.approx(5.5)]  # to step 9's end


def test_a_step_under_way_at_the_kill_is_not_counted_as_restart_too():
    # Rank 0's step 4 runs 3.0 -> 4.0 across the kill at 3.5; training is back at 6.0.
    history = _reports([1, 2, 3, 4], 0.0) + _reports([5, 6], 6.0)
    out = lost_time.lost_time(history, kills=[3.5], t0=0.0, t1=8.0)
    assert out["restarts_s"] == pytest.approx(2.0)  # from step 4's end, not the kill
    assert out["redone_steps"] == 0


def test_a_kill_before_the_first_step_is_start_up_not_a_restart():
    history = _reports([1, 2, 3], 5.0)
    out = lost_time.lost_time(history, kills=[2.0], t0=0.0, t1=8.0)
    assert out["restarts_s"] == 0 and out["startup_s"] == 5.0 and out["other_s"] == 0


def test_the_headline_keys_come_from_the_parts_that_ran():
    figures = {
        "recovery": [
            {
                "recoveries_s": [1.0, 2.0, 3.0, 9.0],
                "recovery_p50_s": 2.5,
                "recovery_p95_s": 9.0,
            }
        ],
        "goodput": [{"store": "local", "goodput_pct": 91.0}, {"store": "s3", "goodput_pct": 80.0}],
        "cost": [
            {"workload": "mlp", "cost_pct": 9.0, "ci_pct": 1.0},
            {"workload": "w2", "cost_pct": 3.0, "ci_pct": 0.5},
        ],  # fmt: skip
    }
    out = headline.headline(figures)
    assert tuple(out) == headline.KEYS
    assert out == {
        "recovery_p50_s": 2.5,
        "recovery_p95_s": 9.0,
        "recovery_kills": 4,
        "goodput_local": 91.0,
        "goodput_s3": 80.0,
        "cost_pct": 3.0,
        "cost_ci_pct": 0.5,
    }
    empty = headline.headline({"recovery": [], "goodput": [], "cost": []})
    assert empty == dict.fromkeys(headline.KEYS, None) | {"recovery_kills": 0}
    assert headline.p95(list(range(1, 21))) == 19 and headline.p95([4.0]) == 4.0


def test_the_done_when_command_line_parses_to_every_part():
    args = parse_args(["--recovery-kills", "20", "--goodput-minutes", "10", "--json", "x"])
    assert set(args.parts.split(",")) == {"cost", "recovery", "goodput"}
    assert args.recovery_kills == 20 and args.goodput_minutes == 10.0
    assert args.goodput_stores.split(",") == ["local", "s3"]
    assert args.cost_workloads == "w2" and args.cost_pairs >= 4


def test_a_recoverys_breakdown_adds_up_to_its_downtime():
    first = {"step": 9, "step_s": 0.8, "t": 14.0, "entered_t": 11.0}
    history = _reports([7, 8], 0.0) + [first | {"build_s": 0.7, "restore_s": 0.4}]
    (row,) = lost_time.breakdown(history, [10.0])
    assert row == {
        "to_loop_s": 1.0,
        "build_s": 0.7,
        "restore_s": 0.4,
        "first_step_s": 0.8,
        "downtime_s": 4.0,
    }
    assert lost_time.breakdown(history, [12.0]) == []  # no attempt began after it
    rows = [row, row | {"build_s": 0.1}, row | {"build_s": 0.3}]
    assert lost_time.medians(rows)["build_s"] == 0.3


def test_the_pages_section_is_written_from_the_json_between_its_markers(tmp_path):
    from raytf.bench import ft_report
    from raytf.bench.checkpoints import main

    figures = {
        "recovery_p50_s": 1.42,
        "recovery_p95_s": 2.71,
        "recovery_kills": 20,
        "goodput_local": 91.5,
        "goodput_s3": None,
        "cost_pct": 3.25,
        "cost_ci_pct": 1.5,
        "recovery": [{"breakdown_p50": dict.fromkeys(
            ("to_loop_s", "build_s", "restore_s", "first_step_s", "downtime_s"), 0.5)}],
        "goodput": [{"store": "local", "kills": 9, "wall_s": 720.0,
                     "lost": {f"{c}_pct": 10.0 for c in ft_report.CATEGORIES}}],
        "cost": [{"workload": "w2", "pairs_pct": [3.0, 3.5], "pairs_runs": [
            {"pair": 0, "arm": "defaults", "mean_step_s": 0.72},
            {"pair": 0, "arm": "off", "mean_step_s": 0.70}]}],
    }  # fmt: skip
    text = ft_report.render(figures, "2026-12-07")
    assert "Measured 2026-12-07" in text
    assert "| recovery, median (s) | 1.42 | 1.5 | yes |" in text
    assert "| recovery, p95 (s) | 2.71 | 2.5 | no |" in text
    assert "| goodput, loopback S3 (%) | - | 90 | not run |" in text
    assert "| the defaults' cost per step (%) | 3.25 +- 1.50 (95 %) | 2 | no |" in text
    assert "| local | 9 | 12.0 min | 10.0 |" in text
    assert "| 1 | 0.720 s | 0.700 s | +3.0 % |" in text and "| 2 | - s | - s | +3.5 % |" in text
    page = tmp_path / "page.md"
    page.write_text(f"# B\n\nbefore\n{ft_report.BEGIN}\nold\n{ft_report.END}\n\nafter\n")
    src = tmp_path / "figures.json"
    src.write_text(json.dumps(figures))
    main(["--report", str(src), "--out", str(page)])
    out = page.read_text()
    assert out.startswith("# B\n\nbefore\n") and out.endswith("\nafter\n")
    assert "old" not in out and "| recovery, median (s) | 1.42 |" in out
