"""What keeps the driver's per-round work and records bounded at a thousand ranks.

Each piece was found superlinear (or one call per rank per round) by ``raytf bench
control-plane`` at 1,024 simulated ranks; here each is held to its contract at sizes
a unit test builds in milliseconds. No Ray, no TensorFlow.
"""

import collections
import json
import math

from raytf.group.tf_config import tf_config_json, tf_config_jsons
from raytf.group.timeline import RANKS_LISTED, Timeline
from raytf.group.worker_group import POLLS_PER_ROUND, poll_hold_s, unanswered_for
from raytf.messages import CheckpointPart, Report
from raytf.observe.recorder import RECORDED_RANKS, RunRecorder
from raytf.rundir.run_state import WORKERS_LISTED, RunState
from raytf.rundir.storage import Storage
from raytf.worker.context import _ReportBuffer


def test_every_ranks_tf_config_is_the_one_built_for_it_alone():
    for addrs in (
        [("10.0.0.1", 2222), ("10.0.0.2", 2223), ("node-c", 1)],
        [("::1", 2222), ("fe80::2", 40000)],
        [(f"10.1.{i // 250}.{i % 250}", 20000 + i) for i in range(300)],
    ):
        assert tf_config_jsons(addrs) == [tf_config_json(addrs, r) for r in range(len(addrs))]


def test_up_to_polls_per_round_ranks_every_rank_answers_every_round():
    for n in (1, 2, 16, POLLS_PER_ROUND):
        assert {poll_hold_s(n, 0.2, r, k) for r in range(n) for k in range(40)} == {0.0}


def test_past_it_about_polls_per_round_answer_in_each_round_and_the_chief_always():
    n, interval = 1024, 0.2
    turns = math.ceil(n / POLLS_PER_ROUND)
    # Every rank asked in round 0 (as at an attempt's start, or after a commit woke all):
    # the round each one answers in, if it has no news before its turn.
    due = collections.Counter(round(poll_hold_s(n, interval, r, 0) / interval) for r in range(n))
    assert due[0] == 1  # the chief: at once, every round
    assert max(due) == turns and min(k for k in due if k) == 1
    assert all(n // turns - 1 <= due[k] <= n // turns + 1 for k in range(1, turns + 1)), due
    # Asked again in the round it answered in: its next turn is ``turns`` rounds later.
    for r in range(1, n):
        first = round(poll_hold_s(n, interval, r, 0) / interval)
        assert round(poll_hold_s(n, interval, r, first) / interval) == turns


def test_a_held_poll_is_silent_only_past_its_hold():
    # Sent at 10 s with a 3.2 s hold: due at 13.2 s, the time the driver compares.
    assert unanswered_for({1: 13.2}, listened=20.0, for_s=10.0) == []
    assert unanswered_for({1: 13.2}, listened=23.3, for_s=10.0) == [1]


def test_news_wakes_a_held_poll_and_reports_do_not():
    buf = _ReportBuffer()
    buf.put(Report(1, {"loss": 1.0}, None, 0.0))
    assert not buf.news.is_set()  # a report waits for the rank's turn
    buf.put(CheckpointPart(1, 10, {"a": 1}, 0.1))
    assert buf.news.is_set()  # a part goes to the commit at once


def test_the_startup_summary_lists_the_slowest_ranks_and_counts_all():
    timeline = Timeline()
    timeline.origin = 0.0
    n = 1024
    for r in range(n):
        timeline.add_rank(r, {"actor_ready": 1.0, "first_step": 2.0 + (r % 100) / 1000})
    out = timeline.summary()
    assert out["ranks_total"] == n and len(out["ranks"]) == RANKS_LISTED
    assert out["workers_first_step"] == 2.099  # the slowest of all, not of those listed
    assert {float(s["first_step"]) for s in out["ranks"].values()} >= {2.099, 2.098}


def test_state_json_copies_what_it_keeps_and_stays_bounded(tmp_path):
    state = RunState(name="run", run_dir=str(tmp_path))
    state.workers = [
        {"rank": r, "state": "running", "last_step": 100 + r, "gpu_ids": []} for r in range(1024)
    ]
    state.failures = [{"kind": "worker_died", "n": i} for i in range(30)]
    doc = state.document()
    assert doc["workers_total"] == 1024 and len(doc["workers"]) == WORKERS_LISTED
    assert doc["failures_total"] == 30 and len(doc["failures"]) == 20
    state.workers[0]["last_step"] = -1  # the loop goes on while the writer writes
    state.failures[-1]["n"] = -1
    assert doc["workers"][0]["last_step"] == 100 and doc["failures"][-1]["n"] == 29
    assert len(json.dumps(doc)) < 20_000


def test_the_record_keeps_rank_0s_reports_and_a_bounded_share_of_the_others(tmp_path):
    recorder = RunRecorder(Storage(str(tmp_path)), "run")
    n, reports = 1024, 32
    poll = collections.namedtuple("Poll", "reports total_steps output rank")
    for k in range(reports):
        for r in range(n):
            rep = Report(r, {"step": 100 * (k + 1)}, None, float(k))
            recorder.on_poll(1, poll([rep], None, [], r))
    recorder.events.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    by_rank = collections.Counter(line["rank"] for line in lines if line["type"] == "report")
    assert by_rank[0] == reports  # every one of the chief's
    others = sum(v for r, v in by_rank.items() if r)
    turns = math.ceil(n / RECORDED_RANKS)
    assert (n - 1) * reports / turns * 0.9 <= others <= (n - 1) * reports / turns * 1.1
    assert len([r for r in by_rank if r]) == n - 1  # every rank is in the record


def test_up_to_recorded_ranks_every_report_is_recorded(tmp_path):
    recorder = RunRecorder(Storage(str(tmp_path)), "run")
    poll = collections.namedtuple("Poll", "reports total_steps output rank")
    for k in range(5):
        for r in range(RECORDED_RANKS):
            recorder.on_poll(1, poll([Report(r, {"step": k}, None, float(k))], None, [], r))
    recorder.events.close()
    text = (tmp_path / "metrics.jsonl").read_text()
    assert text.count('"type": "report"') == 5 * RECORDED_RANKS


def test_a_group_shrunk_to_64_ranks_records_every_report_again(tmp_path):
    """An elastic group of 100 ranks that restarts with 64: from that attempt on, every
    report of every rank is recorded, as for any group of 64."""
    recorder = RunRecorder(Storage(str(tmp_path)), "run")
    poll = collections.namedtuple("Poll", "reports total_steps output rank")
    for attempt, ranks in ((1, 100), (2, RECORDED_RANKS)):
        for k in range(4):
            for r in range(ranks):
                rep = Report(r, {"step": k}, None, float(k))
                recorder.on_poll(attempt, poll([rep], None, [], r))
    recorder.events.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    second = [line for line in lines if line["type"] == "report" and line["attempt"] == 2]
    assert len(second) == 4 * RECORDED_RANKS
    first = [line for line in lines if line["type"] == "report" and line["attempt"] == 1]
    # 100 ranks: the others in turn (2 turns), once the recorder has seen more than 64.
    assert len([line for line in first if line["rank"] == 0]) == 4 and len(first) < 4 * 100
