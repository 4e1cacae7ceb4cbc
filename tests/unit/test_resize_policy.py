"""The resize policy, asked without Ray: a fake clock, fake drain and growth queries, and the
decisions it hands the controller checked field by field."""

import types

import pytest

from raytf.checkpoint.layout import CommittedCheckpoint
from raytf.config import ScalingConfig
from raytf.driver import resize_policy
from raytf.driver.resize_policy import NOTHING, ResizePolicy, Restart
from raytf.group.elastic import WorldSize, choose_world_size
from raytf.settings import Settings

WALL = 1000.0  # what time.time() says inside the policy (deadlines are Unix seconds)
NODE = "node0123456789abcdef"


@pytest.fixture(autouse=True)
def wall_clock(monkeypatch):
    monkeypatch.setattr(resize_policy, "time", types.SimpleNamespace(time=lambda: WALL))


class Query:
    """A read-only query the policy may call: answers ``value``, counts its calls."""

    def __init__(self, value=None):
        self.value = value
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.value


def make(num_workers=2, batch=None, drain_s=1.0, grow_s=2.0):
    scaling = ScalingConfig(num_workers=num_workers, global_batch_size=batch)
    settings = Settings(drain_check_interval_s=drain_s, grow_check_interval_s=grow_s)
    return ResizePolicy(scaling, settings)


def ckpt(step, reason, committed_at=WALL):
    manifest = {"reason": reason, "committed_at": committed_at}
    return CommittedCheckpoint(step, f"/run/checkpoints/step_{step:09d}", manifest)


# -- drains ---------------------------------------------------------------------------
def test_a_drained_node_asks_for_a_termination_checkpoint():
    policy = make()
    drains, growth = Query({NODE: WALL + 30.0}), Query()
    d = policy.poll(10.0, drains, growth)
    assert d.request_checkpoint == "termination"
    assert d.drain == {"node_id": NODE, "deadline": WALL + 30.0, "noticed_at": WALL}
    assert d.say == (
        "termination notice (node node01234567 is draining, 30 s before its deadline): "
        "checkpoint at the next step, then restart",
    )
    assert d.restart is None and not d.evict and d.resize is None
    assert growth.calls == 0  # a drain outranks growth in the same poll


def test_the_earliest_deadline_names_the_drain_and_every_draining_node_is_left():
    policy = make()
    drains = {"nodeA-no-deadline": 0.0, "nodeB-later": WALL + 50.0, "nodeC-sooner": WALL + 20.0}
    d = policy.poll(10.0, Query(drains), Query())
    assert d.drain["node_id"] == "nodeC-sooner" and d.drain["deadline"] == WALL + 20.0
    assert "node nodeC-sooner is draining, 20 s before its deadline" in d.say[0]
    assert policy.preempted().evict == frozenset(drains)


def test_a_drain_without_a_deadline_logs_none():
    policy = make()
    d = policy.poll(10.0, Query({NODE: 0.0}), Query())
    assert d.drain["deadline"] is None
    assert d.say[0].startswith("termination notice (node node01234567 is draining):")
    assert "deadline" not in d.say[0]


def test_a_second_poll_while_a_notice_is_pending_decides_nothing():
    policy = make(num_workers=(2, 3), grow_s=0.0)
    drains, growth = Query({NODE: WALL + 30.0}), Query((WorldSize(3), [2]))
    assert policy.poll(10.0, drains, growth).request_checkpoint == "termination"
    assert policy.poll(20.0, drains, growth) is NOTHING
    assert policy.poll(30.0, drains, growth) is NOTHING
    assert drains.calls == 1 and growth.calls == 0


def test_drain_checks_are_rate_limited():
    policy = make(drain_s=1.0)
    drains = Query({})
    assert policy.poll(10.0, drains, Query()) is NOTHING
    assert drains.calls == 1
    policy.poll(10.5, drains, Query())
    policy.poll(10.99, drains, Query())
    assert drains.calls == 1
    policy.poll(11.0, drains, Query())
    assert drains.calls == 2
    drains.value = {NODE: WALL + 30.0}
    assert policy.poll(11.5, drains, Query()) is NOTHING  # not asked yet: too soon
    assert drains.calls == 2
    assert policy.poll(12.0, drains, Query()).request_checkpoint == "termination"
    assert drains.calls == 3


def test_on_notice_says_once_and_silences_the_polls():
    policy = make()
    first = policy.on_notice("SIGTERM on rank 1")
    assert first.say == (
        "termination notice (SIGTERM on rank 1): checkpoint at the next step, then restart",
    )
    assert first.request_checkpoint is None  # the worker's notifier saves on its own
    assert policy.on_notice("SIGTERM on rank 0") == NOTHING
    drains = Query({NODE: WALL + 30.0})
    assert policy.poll(10.0, drains, Query()) is NOTHING
    assert drains.calls == 0


# -- commits --------------------------------------------------------------------------
def test_a_termination_commit_restarts_for_preemption_with_its_time_to_spare():
    policy = make()
    policy.poll(10.0, Query({NODE: WALL + 30.0}), Query())
    d = policy.committed(ckpt(40, "termination", committed_at=WALL + 12.25))
    assert d.restart is Restart.PREEMPTION
    assert d.drain_committed == {
        "checkpoint_step": 40,
        "committed_at": WALL + 12.25,
        "seconds_to_spare": 17.75,
    }
    assert d.say == ("termination checkpoint committed at step 40",)


def test_a_termination_commit_past_the_deadline_has_negative_time_to_spare():
    policy = make()
    policy.poll(10.0, Query({NODE: WALL + 5.0}), Query())
    d = policy.committed(ckpt(41, "termination", committed_at=WALL + 7.5))
    assert d.drain_committed["seconds_to_spare"] == -2.5


def test_a_termination_commit_of_a_drain_without_deadline_has_no_time_to_spare():
    policy = make()
    policy.poll(10.0, Query({NODE: 0.0}), Query())
    d = policy.committed(ckpt(40, "termination"))
    assert d.restart is Restart.PREEMPTION
    assert set(d.drain_committed) == {"checkpoint_step", "committed_at"}


def test_a_termination_commit_after_a_worker_notice_has_no_log_entry_to_update():
    policy = make()
    policy.on_notice("SIGTERM")
    d = policy.committed(ckpt(40, "termination"))
    assert d.restart is Restart.PREEMPTION and d.drain_committed is None


def test_an_interval_commit_restarts_only_once_spares_are_ready():
    policy = make(num_workers=(2, 3))
    assert policy.committed(ckpt(10, "interval")) is NOTHING
    ready = policy.spares_ready(WorldSize(3))
    assert ready.request_checkpoint == "resize"
    assert ready.say == ("room for 3 workers again: checkpoint, then restart at that size",)
    assert policy.committed(ckpt(20, "interval")).restart is Restart.RESIZE
    assert policy.committed(ckpt(21, "resize")).restart is Restart.RESIZE


# -- growth ---------------------------------------------------------------------------
def test_a_fixed_size_group_never_looks_for_growth():
    policy = make(num_workers=2, grow_s=0.0)
    growth = Query((WorldSize(3), [2]))
    assert policy.poll(10.0, Query({}), growth) is NOTHING
    assert policy.poll(20.0, Query({}), growth) is NOTHING
    assert growth.calls == 0


def test_growth_warms_spares_in_the_slots_found_and_is_rate_limited():
    policy = make(num_workers=(2, 3), grow_s=2.0)
    growth = Query(None)
    assert policy.poll(10.0, Query({}), growth) is NOTHING
    assert growth.calls == 1
    assert policy.poll(11.0, Query({}), growth) is NOTHING
    assert policy.poll(11.9, Query({}), growth) is NOTHING
    assert growth.calls == 1
    size = WorldSize(3)
    growth.value = (size, [2, 5])
    d = policy.poll(12.0, Query({}), growth)
    assert growth.calls == 2
    assert d.warm_spares == (2, 5) and isinstance(d.warm_spares, tuple)
    assert d.grow_to is size
    assert d.request_checkpoint is None and d.restart is None
    policy.spares_ready(size)
    assert policy.poll(100.0, Query({}), growth) is NOTHING  # already growing
    assert growth.calls == 2


# -- between attempts -----------------------------------------------------------------
def test_preempted_evicts_the_draining_nodes_and_the_resize_says_preemption():
    policy = make(num_workers=(2, 3))
    assert policy.placed(WorldSize(3), set()).world_size == 3
    assert policy.started(1, 0) is NOTHING  # the first attempt is no resize
    policy.poll(10.0, Query({NODE: WALL + 30.0, "other-node": 0.0}), Query())
    policy.committed(ckpt(40, "termination"))
    d = policy.preempted()
    assert d.evict == frozenset({NODE, "other-node"})
    assert d.restart is None and policy.why == "preemption"
    assert policy.notice is None
    placed = policy.placed(WorldSize(2), {NODE})  # the drained node is gone: still preemption
    assert placed.world_size == 2 and policy.why == "preemption"
    started = policy.started(2, 40)
    r = started.resize
    assert (r.attempt, r.before, r.after, r.reason, r.step) == (2, 3, 2, "preemption", 40)
    assert started.say == ("group shrinks 3 -> 2 workers (preemption)",)


def test_a_lost_node_resize_keeps_the_global_batch():
    policy = make(num_workers=(2, 3), batch=12)
    policy.placed(WorldSize(3), set())
    policy.started(1, 0)
    policy.restarting("worker died")
    policy.placed(WorldSize(2), {"gone-node"})
    assert policy.why == "node lost"
    d = policy.started(2, 50)
    r = d.resize
    assert (r.attempt, r.before, r.after, r.reason, r.step) == (2, 3, 2, "node lost", 50)
    assert d.say == (
        "group shrinks 3 -> 2 workers (node lost); global batch stays 12, 6 per replica",
    )
    assert r.to_dict()["reason"] == "node lost"


def test_growing_back_is_a_resize_for_capacity_returned_even_with_lost_nodes():
    policy = make(num_workers=(2, 3), batch=12)
    policy.placed(WorldSize(2), set())
    policy.started(1, 0)
    policy.restarting(Restart.RESIZE.value)
    policy.placed(WorldSize(3), {"long-gone-node"})
    assert policy.why == "capacity returned"
    d = policy.started(2, 80)
    assert (d.resize.before, d.resize.after, d.resize.reason) == (2, 3, "capacity returned")
    assert d.say == (
        "group grows 2 -> 3 workers (capacity returned); global batch stays 12, 4 per replica",
    )


def test_no_resize_is_recorded_when_the_size_did_not_change():
    policy = make(num_workers=(2, 3), batch=12)
    policy.placed(WorldSize(3), set())
    policy.started(1, 0)
    policy.restarting("worker died")
    policy.placed(WorldSize(3), {"gone-node"})
    d = policy.started(2, 30)
    assert d is NOTHING and d.resize is None


def test_a_resize_is_recorded_once():
    policy = make(num_workers=(2, 3))
    policy.placed(WorldSize(3), set())
    policy.started(1, 0)
    policy.restarting("worker died")
    policy.placed(WorldSize(2), set())
    assert policy.started(2, 10).resize.reason == "worker died"
    policy.restarting("hang")
    policy.placed(WorldSize(2), set())
    assert policy.started(3, 20) is NOTHING


def test_a_resize_without_a_restart_reason_is_placement():
    policy = make(num_workers=(2, 3))
    policy.placed(WorldSize(3), set())
    policy.started(1, 0)
    policy.placed(WorldSize(2), set())
    assert policy.started(2, 5).resize.reason == "placement"


def test_placed_passes_on_why_fewer_workers_run():
    scaling = ScalingConfig(num_workers=(2, 3), global_batch_size=4)
    policy = ResizePolicy(scaling, Settings())
    size = choose_world_size(scaling, 3)  # 4 does not split over 3
    d = policy.placed(size, set())
    assert d.world_size == 2
    assert len(d.say) == 1 and "does not split over 3 worker(s)" in d.say[0]
    assert policy.placed(choose_world_size(scaling, 2), set()).say == ()


def test_started_forgets_the_attempts_drain_and_growth():
    policy = make(num_workers=(2, 3))
    policy.placed(WorldSize(2), set())
    policy.started(1, 0)
    policy.poll(10.0, Query({NODE: WALL + 30.0}), Query())
    policy.spares_ready(WorldSize(3))
    policy.started(2, 40)
    assert policy.committed(ckpt(50, "interval")) is NOTHING  # no growth pending any more
    assert policy.preempted().evict == frozenset()  # no draining node remembered
    again = policy.poll(20.0, Query({NODE: WALL + 30.0}), Query())  # still draining: seen again
    assert again.request_checkpoint == "termination" and again.drain["node_id"] == NODE


def test_a_new_attempt_acts_on_notices_again():
    policy = make()
    policy.on_notice("SIGTERM on rank 0")  # the attempt then failed before its checkpoint
    policy.restarting("worker died")
    policy.placed(WorldSize(2), set())
    policy.started(2, 10)
    assert (
        policy.on_notice("SIGTERM on rank 1")
        .say[0]
        .startswith("termination notice (SIGTERM on rank 1)")
    )
