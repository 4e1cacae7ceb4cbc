"""The worker pool and elastic slots on a real Ray instance: placement groups, standbys
promoted in place, a standby SIGKILLed from outside found and replaced, nothing left.

Workers are the control-plane benchmark's TF-free ``LiteWorker`` (the real actor
with TensorFlow's import swapped out), so these tests cost seconds, not imports.
"""

import os
import signal
import time

import ray
from ray.util import placement_group_table

from raytf.bench.control_plane import LitePool
from raytf.config import ScalingConfig
from raytf.group.pool import kill_actor
from raytf.group.slots import ElasticSlots

from .cluster_state import wait_until_idle


def _pids(actors) -> list[int]:
    return ray.get([a.ping.remote() for a in actors], timeout=60)


def _state(pg) -> str:
    return placement_group_table(pg)["state"]


def test_pool_promotes_standbys_and_replaces_a_killed_one(ray_cluster):
    pool = LitePool(
        ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}), run_name="pool-test"
    )
    try:
        size = pool.place(30, lambda what, waited: None)
        assert size.workers == 2 and pool.active == [0, 1]
        first = pool.actors_for_ranks()
        assert [promoted for _, promoted in first] == [False, False]
        first_pids = _pids([a for a, _ in first])
        assert len(set(first_pids)) == 2

        pool.add_standbys()
        standby_pids = _pids([pool.standbys[s] for s in (0, 1)])
        assert not set(standby_pids) & set(first_pids)
        for actor, _ in first:  # the attempt ends: its actors go, the standbys stay
            kill_actor(actor)

        pool.place(30, lambda what, waited: None)
        second = pool.actors_for_ranks()
        assert [promoted for _, promoted in second] == [True, True]
        assert _pids([a for a, _ in second]) == standby_pids  # the same processes, promoted
        assert pool.standbys == {}

        pool.add_standbys()
        spare_pids = _pids([pool.standbys[s] for s in (0, 1)])
        os.kill(spare_pids[1], signal.SIGKILL)  # from outside, as a node's OOM killer would
        for actor, _ in second:
            kill_actor(actor)
        deadline = time.monotonic() + 30
        while 1 in pool.standbys and time.monotonic() < deadline:
            pool.place(30, lambda what, waited: None)  # pings standbys, drops dead ones
        assert list(pool.standbys) == [0]
        third = pool.actors_for_ranks()
        assert [promoted for _, promoted in third] == [True, False]
        third_pids = _pids([a for a, _ in third])
        assert third_pids[0] == spare_pids[0] and third_pids[1] not in spare_pids
        pg = pool.slots.pg
        for actor, _ in third:
            kill_actor(actor)
    finally:
        pool.close()
    assert _state(pg) == "REMOVED"
    assert pool.standbys == {} and pool.spares == {}


def test_elastic_slots_place_what_fits_and_give_back_a_drained_node(ray_cluster):
    cpus = wait_until_idle()  # the test before gave its CPUs back asynchronously
    per = cpus / 2 - 0.25  # two fit on the cluster, a third does not
    scaling = ScalingConfig(num_workers=(1, 3), resources_per_worker={"CPU": per}, elastic_wait_s=1)
    slots = ElasticSlots(scaling, "elastic-test")
    try:
        active, size = slots.place(30, lambda what, waited: None, lambda placed: sorted(placed))
        assert size.workers == 2 and len(active) == 2
        placed = slots.placed()
        assert sorted(placed) == active and len(set(placed.values())) == 1  # one node here
        pgs = list(slots.pgs)
        assert [_state(pg) for pg in pgs].count("CREATED") == 2
        node = next(iter(placed.values()))
        evicted = slots.evict({node})
        assert sorted(evicted) == active  # both slots sat on the drained node
        assert all(_state(pgs[s]) == "REMOVED" for s in evicted)
        assert all(pg is not None for pg in slots.pgs)  # asked for again, elsewhere
    finally:
        slots.close()
    assert slots.pgs == [None, None, None]
    assert all(_state(pg) == "REMOVED" for pg in pgs)


def test_a_held_poll_answers_at_its_news_or_its_turn(ray_cluster, tmp_path):
    """The real worker's side of ``poll_hold_s`` (a group past 64 ranks): a held poll
    waits out its hold while the loop only steps, and answers as soon as the loop ends."""
    from raytf.bench.control_plane import LiteWorker, sleep_loop
    from raytf.group.tf_config import tf_config_json
    from raytf.messages import FINISHED, RUNNING, CheckpointPlan

    cls = ray.remote(LiteWorker).options(num_cpus=0.1, max_concurrency=3)
    worker = cls.remote(0, 1, False, 0, {})
    try:
        info = ray.get(worker.reserve.remote(), timeout=60)
        ray.get(worker.setup.remote(tf_config_json([(info.node_ip, info.port)], 0), "RING"))
        config = {"steps": 30, "step_s": 0.1}
        plan = CheckpointPlan(dir="checkpoints")
        ray.get(worker.start.remote(sleep_loop, config, str(tmp_path), 0, plan, None))
        t0 = time.monotonic()
        held = ray.get(worker.poll.remote(1.0), timeout=60)
        waited = time.monotonic() - t0
        assert held.state == RUNNING and 1.0 <= waited < 2.5, (held.state, waited)
        assert held.step is not None and held.step >= 5  # it stepped while held
        t0 = time.monotonic()
        ended = ray.get(worker.poll.remote(60.0), timeout=90)
        # The loop's end (about 2 s on), not the 60 s hold, ended the wait.
        assert ended.state == FINISHED and time.monotonic() - t0 < 10, ended.state
        assert ended.result == {"steps": 30}
    finally:
        kill_actor(worker)


def test_a_dead_ranks_held_poll_is_heard_within_the_root_cause_wait(ray_cluster, tmp_path):
    """Past 64 ranks most polls are held; when peers report a broken collective, the
    driver listens ``collateral_grace_s`` for the dead rank (``root_cause``): that wait
    must hear a held poll fail, not only the chief's. 70 simulated ranks in one host."""
    from raytf.bench.sim_ranks import RankHandle, start_hosts
    from raytf.config import ScalingConfig
    from raytf.errors import WorkerDiedError
    from raytf.group.worker_group import WorkerGroup
    from raytf.messages import CheckpointPlan

    ((host, _),) = start_hosts(70, per_host=70)
    group = WorkerGroup(ScalingConfig(num_workers=70), pool=None, attempt=1)

    group.actors = [RankHandle(host, r) for r in range(70)]
    try:
        group.setup(60)
        # A step every 2 ms; rank 69 dies after step 400, about 0.8 s from the start.
        config = {"steps": 10_000, "step_s": 0.002, "die": {"rank": 69, "step": 400}}
        group.run(None, config, str(tmp_path), CheckpointPlan(dir="checkpoints"))
        group.poll(2.0)  # the chief answers at once; the others hold theirs 2 or 4 s
        assert all(group._held[1:]) and not group._held[0]
        # At once, as root_cause does after a peer's error: the death comes within it.
        t0 = time.monotonic()
        answers = group.poll(3.0, hold=False)
        died = [a.rank for a in answers if isinstance(a, WorkerDiedError)]
        assert died == [69], (died, time.monotonic() - t0)
    finally:
        kill_actor(host)
