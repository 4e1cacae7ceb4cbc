"""What an operator reads: ``raytf status``'s view, ``raytf runs``'s list and ``raytf logs``,
from hand-made state documents, records and files on tmp_path."""

import json
import os
import sys

import pytest

from raytf.rundir.storage import Storage
from raytf.tools import run_records as rr
from raytf.tools.cli import main
from raytf.tools.logs import Follower, follow, rank_logs
from raytf.tools.runs import format_runs, read_runs
from raytf.tools.status_view import format_status, human_duration, one_line

from .records import report

pytestmark = pytest.mark.unit

NOW = 10_000.0


def state(**over):
    doc = {
        "name": "digits",
        "run_dir": "/runs/digits",
        "state": "RUNNING",
        "attempt": 1,
        "num_workers": 2,
        "min_workers": 2,
        "world_size": 2,
        "driver_pid": 77,
        "workers": [
            {
                "rank": 1,
                "node_ip": "10.0.0.2",
                "pid": 12,
                "gpu_ids": [],
                "state": "running",
                "last_step": 290,
            },
            {
                "rank": 0,
                "node_ip": "10.0.0.1",
                "pid": 11,
                "gpu_ids": [0],
                "state": "running",
                "last_step": 300,
            },
        ],
        "last_step": 300,
        "checkpoints": [100, 200, 300],
        "failures": [],
        "recoveries_s": [],
        "resumed_at": [],
        "preemptions": 0,
        "preemption_log": [],
        "resizes": [],
        "startup": {},
        "updated": NOW - 3,
    }
    doc.update(over)
    return doc


def records_two_attempts():
    """Attempt 0 at 1 step/s, attempt 1 at 10 steps/s: the rate must be the current one's."""
    recs = [{"type": "total_steps", "time": 0.0, "value": 1000}]
    recs += [report(s, 100.0 + s) for s in range(0, 160, 10)]
    recs.append({"type": "restart", "time": 300.0, "attempt": 1})
    recs += [report(s, 400.0 + (s - 100) / 10, attempt=1) for s in range(100, 310, 10)]
    recs += [report(s, 400.0 + (s - 100) / 10, rank=1, attempt=1) for s in range(100, 300, 10)]
    return recs


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0 s"),
        (12.7, "12 s"),
        (59, "59 s"),
        (300, "5 min"),
        (3 * 3600 + 5, "3 h"),
        (2 * 86400 + 7, "2 d"),
        (-4, "0 s"),
    ],
)
def test_human_duration(seconds, text):
    assert human_duration(seconds) == text


def test_step_rate_is_the_current_attempts_last_reports():
    recs = records_two_attempts()
    assert rr.step_rate(recs, 1) == pytest.approx(10.0)
    assert rr.step_rate(recs, 0) == pytest.approx(1.0)
    assert rr.step_rate(recs, 5) == pytest.approx(10.0)  # never reported: the newest one
    assert rr.step_rate([report(3, 1.0)], 0) is None
    assert rr.total_steps(recs) == 1000
    assert rr.step_at(recs, 115.5) == 10
    assert rr.step_at(recs, 50.0) is None


def test_status_view_of_a_running_run():
    startup = {"driver_started": 5.0, "placed": 1.25, "workers_first_step": 9.0, "ranks": {}}
    text = format_status(state(startup=startup), records_two_attempts(), NOW)
    lines = text.splitlines()
    assert "start-up: placed 1.2 s, workers_first_step 9.0 s" in lines
    assert lines[0] == "run digits: RUNNING (attempt 1)"
    assert lines[1] == "step 300 / 1000 (30.0 %), 10 steps/s, ETA 1 min"
    assert "state written 3 s ago" in lines[2] and "driver pid 77" in lines[2]
    assert "world size 2" in text and "elastic" not in text
    table = [line.split() for line in lines if line.startswith("  ")]
    assert table[0] == ["rank", "node", "ip", "pid", "gpus", "state", "last", "step"]
    assert table[1] == ["0", "10.0.0.1", "11", "0", "running", "300"]
    assert table[2] == ["1", "10.0.0.2", "12", "-", "running", "290"]
    assert "checkpoints: 3, latest at step 300" in lines
    assert "failures" not in text and "resizes" not in text and "preemptions" not in text
    assert lines[-1] == (
        "more: raytf logs /runs/digits [--rank R] [--follow]; raytf plot /runs/digits"
    )


def test_status_view_of_a_troubled_run():
    cause = "WorkerDiedError: rank 1 died:\n  Traceback ...\n" + "y" * 300
    doc = state(
        state="ERRORED",
        min_workers=1,
        checkpoints=[],
        failures=[{"attempt": 0, "kind": "worker_died", "cause": cause, "time": 1.0, "step": 150}],
        recoveries_s=[12.25],
        resizes=[
            {"attempt": 1, "before": 2, "after": 1, "reason": "node lost", "step": 100, "at": 5.0}
        ],
        preemptions=1,
        preemption_log=[{"node_id": "abc", "checkpoint_step": 100, "seconds_to_spare": 4.5}],
    )
    text = format_status(doc, records_two_attempts(), NOW)
    assert "ETA" not in text  # not running: no ETA
    assert "world size 2 (elastic 1-2)" in text
    assert "checkpoints: none" in text
    failure = [line for line in text.splitlines() if "worker_died" in line]
    assert failure == [f"  attempt 0: worker_died at step 150: {one_line(cause)}"]
    assert len(one_line(cause)) == 100 and "\n" not in one_line(cause)
    assert "recoveries: 12.2 s" in text or "recoveries: 12.3 s" in text
    assert "  attempt 1: 2 -> 1 workers (node lost), resumed from step 100" in text
    assert "preemptions: 1" in text
    assert "  node abc: drain noticed, checkpoint at step 100 committed 4.5 s before" in text


def test_a_running_state_not_written_for_long_is_questioned():
    assert "is the driver still alive?" in format_status(state(updated=NOW - 300), [], NOW)
    assert "alive" not in format_status(state(updated=NOW - 3), [], NOW)
    assert "alive" not in format_status(state(state="FINISHED", updated=NOW - 300), [], NOW)


def test_status_view_without_records_or_step():
    text = format_status(state(last_step=None, workers=[], updated=0.0), [], NOW)
    assert text.splitlines()[1] == "step -"
    assert "node ip" not in text


def test_status_json_prints_state_json_as_it_is(tmp_path, capsys):
    run = tmp_path / "digits"
    run.mkdir()
    doc = state(run_dir=str(run), checkpoints=[])
    (run / "state.json").write_text(json.dumps(doc))
    assert main(["status", str(run), "--json"]) == 0
    assert capsys.readouterr().out == json.dumps(doc, indent=2, sort_keys=True) + "\n"
    assert main(["status", str(run)]) == 0
    assert capsys.readouterr().out.startswith("run digits: RUNNING (attempt 1)\n")
    assert main(["status", str(tmp_path), "--json"]) == 2
    assert "not a raytf run directory" in capsys.readouterr().err


def test_runs_newest_first_skipping_directories_without_state(tmp_path, capsys):
    for name, updated in (("old", NOW - 2 * 86400), ("new", NOW - 12), ("mid", NOW - 300)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "state.json").write_text(
            json.dumps(
                {
                    "name": name,
                    "state": "FINISHED",
                    "attempt": 0,
                    "last_step": 5,
                    "updated": updated,
                }
            )
        )
    (tmp_path / "scratch").mkdir()
    docs = read_runs(Storage(str(tmp_path)))
    assert [d["name"] for d in docs] == ["new", "mid", "old"]
    lines = format_runs(docs, NOW).splitlines()
    assert lines[0].split() == ["name", "state", "attempt", "last", "step", "age"]
    assert [line.split()[-2:] for line in lines[1:]] == [["12", "s"], ["5", "min"], ["2", "d"]]
    assert main(["runs", str(tmp_path / "scratch")]) == 0
    assert capsys.readouterr().out.startswith("no runs under")
    assert main(["runs", str(tmp_path / "missing")]) == 2
    assert main(["runs", str(tmp_path), "--json"]) == 0
    assert [d["name"] for d in json.loads(capsys.readouterr().out)] == ["new", "mid", "old"]


class Steps:
    """A fake clock and sleep: each sleep runs the next scripted change to the files."""

    def __init__(self, changes):
        self.t, self.changes = 0.0, list(changes)

    def clock(self):
        return self.t

    def sleep(self, seconds):
        self.t += seconds
        if self.changes:
            self.changes.pop(0)()


def test_logs_follow_prints_appends_until_the_run_ended_and_went_quiet(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank_0.log").write_text("a\n")
    (tmp_path / "state.json").write_text(json.dumps({"state": "RUNNING"}))

    def append(name, text):
        return lambda: open(os.path.join(logs, name), "a").write(text)

    def end():
        (tmp_path / "state.json").write_text(json.dumps({"state": "FINISHED"}))

    steps = Steps(
        [
            append("rank_0.log", "b\nhal"),
            append("rank_1.log", "x\n"),
            end,
            append("rank_0.log", "f\n"),
        ]
    )
    storage = Storage(str(tmp_path))
    follower = Follower(storage, None, sys.stdout, prefixed=True)
    follow(follower, poll_s=0.5, quiet_s=2.0, sleep=steps.sleep, clock=steps.clock)
    out = capsys.readouterr().out
    assert out == "(rank 0) a\n(rank 0) b\n(rank 1) x\n(rank 0) half\n"
    assert steps.t >= 2.0 + 4 * 0.5  # waited for quiet after the last line
    assert rank_logs(storage) == {0: "rank_0.log", 1: "rank_1.log"}


def test_logs_command(tmp_path, capsys):
    assert main(["logs", str(tmp_path)]) == 2
    assert "no rank logs" in capsys.readouterr().err
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank_0.log").write_text("zero\n")
    (tmp_path / "logs" / "rank_1.log").write_text("one\n")
    assert main(["logs", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "(rank 0) zero\n(rank 1) one\n"
    assert main(["logs", str(tmp_path), "--rank", "1"]) == 0
    assert capsys.readouterr().out == "one\n"
    assert main(["logs", str(tmp_path), "--rank", "4"]) == 2
