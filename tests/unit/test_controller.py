"""The driver's state machine, stepped without Ray: a scripted fake worker group and pool,
held to the same Protocols as the real ones (test_layout.py)."""

import dataclasses

import pytest

from raytf.config import FailureConfig, RunConfig, ScalingConfig
from raytf.driver.controller import Controller
from raytf.driver.failure_policy import pick_root_cause
from raytf.driver.listeners import Listeners
from raytf.driver.outcome import build_result
from raytf.driver.progress import Progress
from raytf.driver.states import Next, State
from raytf.errors import (
    PlacementTimeoutError,
    PortClashError,
    TrainingFailedError,
    WorkerDiedError,
    WorkerError,
)
from raytf.group.elastic import WorldSize
from raytf.messages import FAILED, FINISHED, RUNNING, CheckpointPart, Report, WorkerInfo, WorkerPoll
from raytf.settings import Settings


class FakePool:
    growth_script: list = []  # what growth() answers, call by call
    evicted: list = []

    def __init__(self, scaling, *, run_name, placement_group=None):
        self.closed = False
        self.standbys = 0
        self.warmed = []

    def keep_reserve(self):
        pass

    def add_standbys(self):
        self.standbys += 1

    lost_nodes: set = set()

    def growth(self):
        return FakePool.growth_script.pop(0) if FakePool.growth_script else None

    def warm_spares(self, slots):
        self.warmed.append(slots)
        return True

    def evict(self, node_ids):
        FakePool.evicted.append(set(node_ids))
        return sorted(node_ids)

    def close(self):
        self.closed = True


class FakeGroup:
    """Plays back ``script``: setup outcomes per attempt, then poll rounds (shared by
    attempts, in order)."""

    script: dict = {}
    created: list = []
    polls: list = []
    requests: list = []
    commands: list = []

    def __init__(self, scaling, *, pool, attempt):
        self.n = self.script.get("sizes", {}).get(attempt, scaling.max_workers)
        self.attempt = attempt
        self.pool = pool
        self.promoted = 0
        self.infos = [
            WorkerInfo(r, "127.0.0.2", "n0", "h", 100 + r, 2000 + r, ()) for r in range(self.n)
        ]
        self.shut = False
        FakeGroup.created.append(self)

    def place(self, timeout_s, on_wait):
        err = self.script.get("place_errors", {}).get(self.attempt) or self.script.get(
            "place_error"
        )
        if err:
            raise err
        return WorldSize(self.n)

    def start_actors(self):
        pass

    def setup(self, timeout_s):
        errors = self.script.get("setup_errors", {})
        if self.attempt in errors:
            raise errors[self.attempt]
        return self.n

    def run(self, fn_ref, config, run_dir, ckpt, shards=None):
        self.ckpt = ckpt

    def poll(self, wait_s, hold=True):
        return FakeGroup.polls.pop(0)

    def silent_ranks(self, for_s):
        return []

    def request_checkpoint(self, reason):
        FakeGroup.requests.append(reason)

    def emergency_checkpoint(self, ranks, timeout_s, committed=None):
        return {r: "the fake group holds no state" for r in ranks}

    def send_command(self, command):
        FakeGroup.commands.append(command)

    def draining_nodes(self):
        return self.script.get("draining", {})

    def shutdown(self):
        self.shut = True


def report(rank, step, loss):
    return Report(rank, {"step": step, "loss": loss}, 64, float(step))


FAST = Settings(poll_interval_s=0, collateral_grace_s=0, grow_check_interval_s=0, standby_after_s=0)


def make_controller(tmp_path, script, n=2, failure_config=None, settings=FAST, **kwargs):
    FakeGroup.script = script
    FakeGroup.created = []
    FakeGroup.requests = []
    FakeGroup.polls = list(script.get("polls", []))
    FakePool.growth_script = list(script.get("growth", []))
    FakePool.evicted = []
    ctrl = Controller(
        None,
        {},
        ScalingConfig(num_workers=n, global_batch_size=script.get("batch")),
        RunConfig(
            name="t", storage_path=str(tmp_path), failure_config=failure_config or FailureConfig()
        ),
        Progress(verbose=0),
        group_cls=FakeGroup,
        pool_cls=FakePool,
        settings=settings,
        **kwargs,
    )
    return ctrl


def running(*steps):
    return [WorkerPoll(r, RUNNING, step=s) for r, s in enumerate(steps)]


def test_happy_path_states_history_and_results(tmp_path):
    polls = [
        [WorkerPoll(0, RUNNING, [report(0, 1, 2.0)]), WorkerPoll(1, RUNNING, [report(1, 1, 2.0)])],
        [WorkerPoll(0, FINISHED, [report(0, 2, 1.0)], result="a"), WorkerPoll(1, RUNNING, [])],
        [WorkerPoll(0, FINISHED, [], result="a"), WorkerPoll(1, FINISHED, [], result="b")],
    ]
    ctrl = make_controller(tmp_path, {"polls": polls})
    seen = []
    nxt = Next(State.SCHEDULING)
    while not nxt.state.is_terminal:
        nxt = ctrl._step(nxt)
        seen.append(nxt.state)
    assert seen == [State.STARTING, State.RUNNING, State.RUNNING, State.RUNNING, State.FINISHED]
    ctrl._teardown()
    result = build_result(ctrl.record(nxt.state), ctrl.progress.finish)
    assert [m["step"] for m in result.metrics_history] == [1, 2]  # rank 0 only
    assert result.metrics == {"step": 2, "loss": 1.0}
    assert result.worker_results == ["a", "b"]
    assert FakeGroup.created[0].shut


def test_port_clash_restarts_the_group_on_new_ports(tmp_path):
    polls = [[WorkerPoll(r, FINISHED, [], result=r) for r in range(2)]]
    ctrl = make_controller(tmp_path, {"polls": polls, "setup_errors": {1: PortClashError("x")}})
    result = ctrl.run()
    assert result.attempts == 2
    assert [g.shut for g in FakeGroup.created] == [True, True]


def test_port_clash_forever_gives_up(tmp_path):
    clash = {a: PortClashError(f"clash {a}") for a in range(1, 10)}
    retries = dataclasses.replace(FAST, max_port_retries=2)
    ctrl = make_controller(tmp_path, {"setup_errors": clash}, settings=retries)
    with pytest.raises(TrainingFailedError, match="clash 3"):
        ctrl.run()
    assert len(FakeGroup.created) == 3


def test_user_error_ends_the_run_with_rank_and_traceback(tmp_path):
    err = WorkerError(1, "ValueError", "boom", "Traceback...\nValueError: boom\n")
    polls = [[WorkerPoll(0, RUNNING, []), WorkerPoll(1, FAILED, [], error=err)]]
    ctrl = make_controller(tmp_path, {"polls": polls})
    with pytest.raises(TrainingFailedError, match="rank 1 raised ValueError: boom") as info:
        ctrl.run()
    assert "Traceback from rank 1" in str(info.value)
    assert info.value.causes == [err]
    assert FakeGroup.created[0].shut


def test_dead_worker_ends_the_run_without_retries_when_recovery_is_off(tmp_path):
    polls = [[WorkerPoll(0, RUNNING, []), WorkerDiedError(1, "actor died")]]
    ctrl = make_controller(tmp_path, {"polls": polls}, failure_config=FailureConfig(max_failures=0))
    with pytest.raises(TrainingFailedError, match="rank 1 died"):
        ctrl.run()
    assert len(FakeGroup.created) == 1


def test_by_default_a_crash_loop_stops_after_three_retries_without_a_checkpoint(tmp_path):
    """Nothing configured: a dead worker is retried, and a fourth death in a row with no
    new committed checkpoint between ends the run, listing all four."""
    polls = [[WorkerPoll(0, RUNNING, []), WorkerDiedError(1, f"death {i}")] for i in range(4)]
    ctrl = make_controller(tmp_path, {"polls": polls})
    with pytest.raises(TrainingFailedError, match="rank 1 died: death 3") as info:
        ctrl.run()
    assert len(FakeGroup.created) == 4 and FakeGroup.polls == []
    assert "failures (4)" in str(info.value)


def test_dead_worker_restarts_the_whole_group_and_counts(tmp_path):
    polls = [
        running(5, 5),
        [WorkerPoll(0, RUNNING, []), WorkerDiedError(1, "actor died")],
        running(3, 3),
        [WorkerPoll(r, FINISHED, [], result=r) for r in range(2)],
    ]
    ctrl = make_controller(tmp_path, {"polls": polls}, failure_config=FailureConfig(max_failures=1))
    seen = []
    nxt = Next(State.SCHEDULING)
    while not nxt.state.is_terminal:
        nxt = ctrl._step(nxt)
        seen.append(nxt.state)
    assert seen == [
        State.STARTING, State.RUNNING, State.RUNNING, State.RESTARTING,
        State.SCHEDULING, State.STARTING, State.RUNNING, State.RUNNING, State.FINISHED,
    ]  # fmt: skip
    assert [g.shut for g in FakeGroup.created] == [True, False]
    assert ctrl.pool.standbys == 2  # spares asked for once per attempt, after it ran
    assert len(ctrl.watchdog.recoveries_s) == 1


def test_standbys_wait_until_the_attempt_has_trained_a_while(tmp_path):
    """A run that ends (or fails) within ``standby_after_s`` of its first step pays for no
    spare processes; one that trains on past it asks for them once."""
    for after_s, asked in ((1000.0, 0), (25.0, 1)):
        FakeGroup.created = []
        polls = [running(s, s) for s in range(1, 6)]
        polls.append([WorkerPoll(r, FINISHED, [], result=r) for r in range(2)])
        ticks = iter(range(0, 10_000, 10))  # every reading of the clock is 10 s later
        ctrl = make_controller(
            tmp_path / str(after_s),
            {"polls": polls},
            settings=dataclasses.replace(FAST, standby_after_s=after_s),
            clock=lambda ticks=ticks: float(next(ticks)),
        )
        nxt = Next(State.SCHEDULING)
        while not nxt.state.is_terminal:
            nxt = ctrl._step(nxt)
        assert nxt.state is State.FINISHED
        assert ctrl.pool.standbys == asked, after_s


def test_second_failure_beyond_max_failures_lists_both(tmp_path):
    polls = [
        [WorkerDiedError(0, "first"), WorkerPoll(1, RUNNING, [])],
        [WorkerPoll(0, RUNNING, []), WorkerDiedError(1, "second")],
    ]
    ctrl = make_controller(tmp_path, {"polls": polls}, failure_config=FailureConfig(max_failures=1))
    with pytest.raises(TrainingFailedError, match="rank 1 died: second") as info:
        ctrl.run()
    text = str(info.value)
    assert "failures (2)" in text
    assert "attempt 1: worker_died: rank 0 died: first" in text
    assert "attempt 2: worker_died: rank 1 died: second" in text


def test_user_error_is_not_retried_even_with_failures_left(tmp_path):
    err = WorkerError(0, "KeyError", "'x'", "tb")
    polls = [[WorkerPoll(0, FAILED, [], error=err), WorkerPoll(1, RUNNING, [])]]
    ctrl = make_controller(tmp_path, {"polls": polls}, failure_config=FailureConfig(max_failures=5))
    with pytest.raises(TrainingFailedError, match="rank 0 raised KeyError"):
        ctrl.run()
    assert len(FakeGroup.created) == 1


def test_watchdog_declares_a_hang(tmp_path):
    polls = [running(1, 1)] + [[None, None]] * 10
    ticks = iter(range(0, 10_000, 10))  # every reading of the clock is 10 s later
    ctrl = make_controller(
        tmp_path,
        {"polls": polls},
        failure_config=FailureConfig(hang_timeout_s=30),
        clock=lambda: float(next(ticks)),
    )
    with pytest.raises(TrainingFailedError, match=r"no progress for \d+ s \(hang_timeout_s=30\)"):
        ctrl.run()
    assert len(FakeGroup.polls) > 0  # it fired within a few silent polls


def test_placement_timeout_is_reported(tmp_path):
    ctrl = make_controller(tmp_path, {"place_error": PlacementTimeoutError("waited 5 s")})
    with pytest.raises(TrainingFailedError, match="waited 5 s"):
        ctrl.run()


def test_root_cause_prefers_user_error_over_peer_abort():
    abort = WorkerError(0, "UnavailableError", "peer gone", "")
    user = WorkerError(1, "KeyError", "k", "")
    died = WorkerDiedError(1, "x")
    assert pick_root_cause([abort, user]) is user
    assert pick_root_cause([abort, died]) is died
    assert pick_root_cause([abort]) is abort


def test_elastic_group_grows_at_the_checkpoint_it_asks_for(tmp_path):
    part = [CheckpointPart(r, 10, {}, 0.01, "resize") for r in range(2)]
    polls = [
        running(9, 9),
        [WorkerPoll(r, RUNNING, parts=[part[r]], step=10) for r in range(2)],
        [WorkerPoll(r, FINISHED, result=r) for r in range(3)],
    ]
    script = {
        "polls": polls,
        "sizes": {1: 2, 2: 3},
        "growth": [(WorldSize(3), [2])],
        "batch": 96,
    }
    ctrl = make_controller(tmp_path, script, n=(2, 3))
    result = ctrl.run()
    assert FakeGroup.requests == ["resize"]
    assert [g.n for g in FakeGroup.created] == [2, 3]
    assert result.attempts == 2 and result.failures == [] and result.preemptions == 0
    (resize,) = result.resizes
    assert (resize["before"], resize["after"], resize["reason"], resize["step"]) == (
        2,
        3,
        "capacity returned",
        10,
    )
    assert ctrl.status.world_size == 3


def test_elastic_group_shrinks_after_a_failure_and_counts_it(tmp_path):
    polls = [
        [WorkerDiedError(0, "node gone"), WorkerPoll(1, RUNNING, step=5), None],
        [WorkerPoll(r, FINISHED, result=r) for r in range(2)],
    ]
    script = {"polls": polls, "sizes": {1: 3, 2: 2}}
    ctrl = make_controller(tmp_path, script, n=(2, 3), failure_config=FailureConfig(max_failures=1))
    result = ctrl.run()
    assert len(result.failures) == 1 and result.attempts == 2
    assert [(r["before"], r["after"], r["reason"]) for r in result.resizes] == [
        (3, 2, "worker died")
    ]


def test_drained_node_gets_a_checkpoint_then_the_group_leaves_it(tmp_path):
    deadline = 2e9
    part = [CheckpointPart(r, 7, {}, 0.01, "termination") for r in range(3)]
    polls = [
        running(6, 6, 6),
        [WorkerPoll(r, RUNNING, parts=[part[r]], step=7) for r in range(3)],
        [WorkerPoll(r, FINISHED, result=r) for r in range(2)],
    ]
    script = {"polls": polls, "sizes": {1: 3, 2: 2}, "draining": {"node-b": deadline}}
    ctrl = make_controller(tmp_path, script, n=(2, 3))
    result = ctrl.run()
    assert FakeGroup.requests == ["termination"]
    assert FakePool.evicted == [{"node-b"}]  # the restart left the draining node
    assert result.failures == [] and result.preemptions == 1 and result.attempts == 2
    (entry,) = ctrl.status.preemption_log
    assert entry["node_id"] == "node-b" and entry["checkpoint_step"] == 7
    assert entry["seconds_to_spare"] > 0
    assert [(r["before"], r["after"], r["reason"], r["step"]) for r in result.resizes] == [
        (3, 2, "preemption", 7)
    ]


def test_stop_request_tears_the_group_down_and_returns(tmp_path):
    """A Tune scheduler's stop: the run ends STOPPED, not failed, its group shut down."""
    polls = [
        [WorkerPoll(0, RUNNING, [report(0, 1, 2.0)]), WorkerPoll(1, RUNNING, [])],
        [WorkerPoll(0, RUNNING, [report(0, 2, 1.0)]), WorkerPoll(1, RUNNING, [])],
    ]
    seen = []
    listeners = Listeners(on_report=lambda m: (seen.append(m["step"]), ctrl.request_stop()))
    ctrl = make_controller(tmp_path, {"polls": polls}, listeners=listeners)
    result = ctrl.run()
    assert seen == [1]  # rank 0's reports go to the listener as they come
    assert result.metrics == {"step": 1, "loss": 2.0}
    assert FakeGroup.created[0].shut and ctrl.pool is None
    assert ctrl.status.state == "STOPPED"


class FakeDataset:
    """Splits into placeholders; its row count and schema are unknown."""

    def streaming_split(self, n, equal):
        assert equal  # MWMS steps are collectives: shards must be the same size
        return [object() for _ in range(n)]

    def schema(self):
        return None


def test_shard_mismatch_fails_the_run_without_retry(tmp_path):
    from raytf.data.feed import DataFeed
    from raytf.messages import ShardEpoch

    ended = [ShardEpoch(0, "train", 0, 7, 448, 64)]
    polls = [
        [
            WorkerPoll(0, RUNNING, shard_epochs=ended, positions={"train": (1, 0)}),
            WorkerPoll(1, RUNNING, positions={"train": (0, 8)}),
        ]
    ]
    ctrl = make_controller(
        tmp_path,
        {"polls": polls},
        failure_config=FailureConfig(max_failures=3),
        data=DataFeed({"train": FakeDataset()}, None),
    )
    with pytest.raises(TrainingFailedError, match="rank 0's shard ended after 7 batches"):
        ctrl.run()
    assert len(FakeGroup.created) == 1


def test_a_storage_check_that_could_not_run_at_placement_costs_one_retry(tmp_path):
    """A node where the shared-storage or access check could not run (it died after
    placement, or is still installing the job's environment): the attempt is retried
    and the check asked again, never the run ended."""
    from raytf.errors import WorkerSetupError

    polls = [[WorkerPoll(r, FINISHED, [], result=r) for r in range(2)]]
    unanswered = WorkerSetupError("the check ... did not run on node 10.0.0.3: the next attempt")
    ctrl = make_controller(tmp_path, {"polls": polls, "place_errors": {1: unanswered}})
    result = ctrl.run()
    assert result.attempts == 2 and [f.kind.value for f in ctrl.failures] == ["setup"]
