"""The run's state.json: written through a real Storage on tmp_path, on a fake clock."""

import json
import os
import types

import pytest

from raytf.checkpoint.layout import CKPT_DIR, MANIFEST, step_dirname
from raytf.config import ScalingConfig
from raytf.errors import WorkerDiedError
from raytf.messages import WorkerInfo
from raytf.rundir import run_state
from raytf.rundir.run_state import STATE_FILE, RunState, load_previous
from raytf.rundir.storage import Storage
from raytf.tools.runs import read_state


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(run_state, "time", types.SimpleNamespace(time=c))
    return c


@pytest.fixture
def storage(tmp_path):
    return Storage(str(tmp_path))


def sink(storage):
    """What the driver's StateWriter does with each document, done at once."""
    return lambda doc: storage.write_json_atomic(doc, STATE_FILE)


def infos():
    return [
        WorkerInfo(0, "10.0.0.1", "node-a", "host-a", 111, 5000, ("0", "1")),
        WorkerInfo(1, "10.0.0.2", "node-b", "host-b", 222, 5001, ()),
    ]


def fresh(tmp_path):
    return RunState(name="run", run_dir=str(tmp_path), num_workers=2, min_workers=2)


def test_save_and_read_state_round_trip(tmp_path, storage, clock):
    state = fresh(tmp_path)
    state.set_workers(infos(), "running")
    state.last_step = 12
    state.checkpoints = [5, 10]
    storage.write_json_atomic({"step": 10, "files": {}}, CKPT_DIR, step_dirname(10), MANIFEST)
    state.add_failure(1, "worker_died", WorkerDiedError(1, "node lost"), at=900.0)
    clock.t = 1234.5
    state.record("SCHEDULING", attempt=0, preemptions=0, workers_ended=False, write=sink(storage))
    doc = read_state(str(tmp_path))
    assert doc["updated"] == 1234.5 and state.updated == 1234.5
    assert doc["driver_pid"] == os.getpid()
    assert doc["state"] == "SCHEDULING" and doc["attempt"] == 0
    # Only checkpoints still there are listed: 5 was pruned after the list was written.
    assert doc["last_step"] == 12 and doc["checkpoints"] == [10]
    assert [w["node_id"] for w in doc["workers"]] == ["node-a", "node-b"]
    assert doc["failures"][0]["cause"] == "WorkerDiedError: rank 1 died: node lost"
    assert doc["world_size"] is None and doc["preemption_log"] == [] and doc["resizes"] == []
    assert load_previous(storage) == {**doc, "checkpoints": [5, 10]}  # the file as written


def test_continuing_carries_the_runs_history_and_nothing_else(tmp_path, storage):
    previous = {
        "name": "old",
        "run_dir": "/elsewhere",
        "state": "RUNNING",
        "attempt": 3,
        "num_workers": 9,
        "min_workers": 9,
        "world_size": 3,
        "driver_pid": 1,
        "workers": [{"rank": 0, "state": "running"}],
        "last_step": 99,
        "checkpoints": [90],
        "failures": [{"attempt": 2, "kind": "hang", "cause": "WorkerHangError: x", "time": 1.0}],
        "recoveries_s": [4.2],
        "resumed_at": [5.0],
        "preemptions": 2,
        "preemption_log": [{"node_id": "n", "deadline": None, "noticed_at": 3.0}],
        "resizes": [{"attempt": 3, "before": 3, "after": 2, "reason": "node lost", "step": 90}],
        "updated": 7.0,
    }
    storage.write_json_atomic(previous, STATE_FILE)
    state = RunState.continuing(
        storage, name="new", run_dir=str(tmp_path), scaling=ScalingConfig(num_workers=(2, 4))
    )
    assert state.attempt == 3
    assert state.failures == previous["failures"]
    assert state.resizes == previous["resizes"]
    assert state.preemption_log == previous["preemption_log"]
    assert (state.name, state.run_dir) == ("new", str(tmp_path))
    assert (state.num_workers, state.min_workers) == (4, 2)
    assert state.state == "SCHEDULING"
    assert state.workers == [] and state.last_step is None and state.checkpoints == []
    assert state.world_size is None and state.preemptions == 0
    assert state.recoveries_s == [] and state.resumed_at == []
    assert state.driver_pid == os.getpid() and state.updated == 0.0


def test_continuing_a_new_run_starts_from_nothing(tmp_path, storage):
    state = RunState.continuing(
        storage, name="new", run_dir=str(tmp_path), scaling=ScalingConfig(num_workers=3)
    )
    assert state.attempt == 0 and state.failures == [] and state.resizes == []
    assert state.preemption_log == []
    assert (state.num_workers, state.min_workers) == (3, 3)


def test_record_writes_every_change_but_running_about_once_a_second(tmp_path, storage, clock):
    state = fresh(tmp_path)
    kw = {"preemptions": 0, "workers_ended": False, "write": sink(storage)}
    clock.t = 100.0
    state.record("SCHEDULING", attempt=1, **kw)
    assert read_state(str(tmp_path))["updated"] == 100.0
    clock.t = 100.2
    state.record("STARTING", attempt=1, **kw)
    assert read_state(str(tmp_path))["state"] == "STARTING"
    clock.t = 100.4
    state.record("RUNNING", attempt=1, **kw)
    clock.t = 100.6
    state.record("RUNNING", attempt=1, **kw)
    doc = read_state(str(tmp_path))
    assert (doc["state"], doc["updated"]) == ("STARTING", 100.2)  # too soon: not written
    assert state.state == "RUNNING"  # but held in memory
    clock.t = 101.2
    state.record("RUNNING", attempt=1, **kw)
    doc = read_state(str(tmp_path))
    assert (doc["state"], doc["updated"]) == ("RUNNING", 101.2)
    clock.t = 101.5
    state.record("RUNNING", attempt=1, **kw)
    assert read_state(str(tmp_path))["updated"] == 101.2
    clock.t = 101.6
    state.record("RESTARTING", attempt=1, preemptions=1, workers_ended=False, write=sink(storage))
    doc = read_state(str(tmp_path))
    assert (doc["state"], doc["updated"], doc["preemptions"]) == ("RESTARTING", 101.6, 1)


def test_record_keeps_writing_non_running_states_however_often(tmp_path, storage, clock):
    state = fresh(tmp_path)
    for i, name in enumerate(["SCHEDULING", "STARTING", "RESTARTING", "SCHEDULING"]):
        clock.t = 200.0 + i * 0.01
        state.record(name, attempt=i, preemptions=0, workers_ended=False, write=sink(storage))
        doc = read_state(str(tmp_path))
        assert (doc["state"], doc["attempt"], doc["updated"]) == (name, i, clock.t)


@pytest.mark.parametrize("final,expected", [("FINISHED", "finished"), ("ERRORED", "stopped")])
def test_workers_ended_marks_every_worker(tmp_path, storage, clock, final, expected):
    state = fresh(tmp_path)
    state.set_workers(infos(), "running")
    state.record(final, attempt=1, preemptions=0, workers_ended=True, write=sink(storage))
    assert [w["state"] for w in read_state(str(tmp_path))["workers"]] == [expected, expected]


def test_workers_not_ended_keep_their_state(tmp_path, storage, clock):
    state = fresh(tmp_path)
    state.set_workers(infos(), "running")
    state.record("RESTARTING", attempt=1, preemptions=0, workers_ended=False, write=sink(storage))
    assert [w["state"] for w in state.workers] == ["running", "running"]


def test_set_workers_makes_one_entry_per_rank(tmp_path, storage, clock):
    state = fresh(tmp_path)
    state.set_workers(infos(), "running")
    assert state.workers == [
        {
            "rank": 0,
            "node_ip": "10.0.0.1",
            "node_id": "node-a",
            "pid": 111,
            "port": 5000,
            "gpu_ids": ["0", "1"],
            "state": "running",
            "last_step": None,
        },
        {
            "rank": 1,
            "node_ip": "10.0.0.2",
            "node_id": "node-b",
            "pid": 222,
            "port": 5001,
            "gpu_ids": [],
            "state": "running",
            "last_step": None,
        },
    ]
    state.workers[0]["last_step"] = 3
    state.set_workers(infos()[:1], "starting")  # a new attempt replaces the list
    assert len(state.workers) == 1 and state.workers[0]["last_step"] is None


def test_add_failure_formats_the_cause(tmp_path):
    state = fresh(tmp_path)
    state.add_failure(2, "user_error", ValueError("bad input"), at=12.5)
    state.last_step = 40  # rank 0's last reported step: where the failure struck
    state.add_failure(3, "worker_died", WorkerDiedError(0, "killed"), at=13.0)
    assert state.failures == [
        {
            "attempt": 2,
            "kind": "user_error",
            "cause": "ValueError: bad input",
            "time": 12.5,
            "step": None,
        },
        {
            "attempt": 3,
            "kind": "worker_died",
            "cause": "WorkerDiedError: rank 0 died: killed",
            "time": 13.0,
            "step": 40,
        },
    ]


def test_load_previous_of_a_missing_or_corrupt_file_is_empty(tmp_path, storage):
    assert load_previous(storage) == {}
    with open(os.path.join(str(tmp_path), STATE_FILE), "w") as f:
        f.write('{"attempt": 3, "fail')
    assert load_previous(storage) == {}
    with open(os.path.join(str(tmp_path), STATE_FILE), "w") as f:
        json.dump({"attempt": 3}, f)
    assert load_previous(storage) == {"attempt": 3}


def week_of_512_workers(tmp_path, failures: int) -> RunState:
    state = RunState(name="run", run_dir=str(tmp_path), num_workers=512, min_workers=512)
    state.set_workers(
        [
            WorkerInfo(r, f"10.0.{r // 8}.1", f"n{r // 8}", "h", 1000 + r, 6000, ())
            for r in range(512)
        ],
        "running",
    )
    for w in state.workers:
        w["last_step"] = 90_000 - (w["rank"] % 100 == 7) * 50  # five stragglers
    for k in range(failures):
        state.add_failure(k + 1, "worker_died", WorkerDiedError(k % 512, "SIGKILL"), 1000.0 + k)
        state.recoveries_s.append(1.5)
        state.resumed_at.append(1001.0 + k)
    return state


def test_state_json_stays_bounded_however_long_and_wide_the_run(tmp_path, storage, clock):
    """Rewritten every second for the run's whole life: its size must not grow with it.
    The newest events are kept with their totals; past 64 workers the ones furthest
    behind are listed; a continuing driver goes on counting."""
    sizes = {}
    for failures in (30, 3000):
        doc = week_of_512_workers(tmp_path, failures).document()
        sizes[failures] = len(json.dumps(doc))
        assert doc["failures_total"] == doc["recoveries_s_total"] == failures
        assert len(doc["failures"]) == len(doc["resumed_at"]) == run_state.RECENT
        assert doc["failures"][-1]["attempt"] == failures  # the newest kept
    assert sizes[3000] == pytest.approx(sizes[30], rel=0.02) and sizes[3000] < 40_000, sizes
    assert doc["workers_total"] == 512 and doc["workers_by_state"] == {"running": 512}
    listed = doc["workers"]
    assert len(listed) == run_state.WORKERS_LISTED
    assert {7, 107, 207, 307, 407} <= {w["rank"] for w in listed}  # the stragglers first
    assert [w["rank"] for w in listed] == sorted(w["rank"] for w in listed)

    storage.write_json_atomic(doc, STATE_FILE)
    scaling = ScalingConfig(num_workers=512)
    again = RunState.continuing(storage, name="run", run_dir=str(tmp_path), scaling=scaling)
    again.add_failure(3001, "worker_died", WorkerDiedError(3, "SIGKILL"), 9999.0)
    assert again.document()["failures_total"] == 3001

    from raytf.tools.status_view import format_status

    text = format_status(doc, [], now=2000.0)
    assert "failures: 3000 (the last 20)" in text
    assert "the 64 furthest behind of 512 workers (512 running)" in text


def test_a_damaged_state_file_is_never_a_crash(tmp_path, storage, caplog, capsys):
    """state.json damaged or edited by hand: a continuing driver takes only the fields of
    the types raytf writes, saying which it left; ``raytf status`` names the file."""
    from raytf.tools.cli import main as cli

    storage.write_json_atomic({"attempt": "three", "failures": [{"kind": "x"}]}, STATE_FILE)
    scaling = ScalingConfig(num_workers=2)
    with caplog.at_level("WARNING", logger="raytf"):
        state = RunState.continuing(storage, name="run", run_dir=str(tmp_path), scaling=scaling)
    assert state.attempt == 0 and state.failures == [{"kind": "x"}]
    assert "ignoring state.json's 'attempt': 'three' is not a whole number" in caplog.text
    assert cli(["status", str(tmp_path)]) == 0  # shown as it is
    assert "(attempt three)" in capsys.readouterr().out
    storage.write_json_atomic({"state": "RUNNING", "failures": "oops"}, STATE_FILE)
    assert cli(["status", str(tmp_path)]) == 2  # the human view cannot show that
    assert "holds fields raytf did not write" in capsys.readouterr().err
    assert cli(["status", str(tmp_path), "--json"]) == 0  # the file as it is
    assert '"failures": "oops"' in capsys.readouterr().out
    for damage in (b"{not json", b"[1, 2]"):
        with open(os.path.join(str(tmp_path), STATE_FILE), "wb") as f:
            f.write(damage)
        assert load_previous(storage) == {}
        assert cli(["status", str(tmp_path)]) == 2
        assert f"{STATE_FILE} in {tmp_path} is unreadable" in capsys.readouterr().err
