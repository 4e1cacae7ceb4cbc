import pytest

from raytf.errors import UnsatisfiableResourcesError
from raytf.group.feasibility import check_satisfiable

TWO_NODES = [{"CPU": 4.0, "memory": 1e9}, {"CPU": 8.0, "GPU": 2.0}]


def test_fitting_groups_pass():
    check_satisfiable({"CPU": 1}, 10, "SPREAD", TWO_NODES)
    check_satisfiable({"CPU": 2, "GPU": 1}, 2, "PACK", TWO_NODES)
    check_satisfiable({"CPU": 4}, 2, "STRICT_PACK", TWO_NODES)
    check_satisfiable({"CPU": 4}, 2, "STRICT_SPREAD", TWO_NODES)


def test_too_big_for_any_node_names_resource_ask_and_largest():
    with pytest.raises(
        UnsatisfiableResourcesError, match=r"asks for 16 CPU.*largest node has 8 CPU"
    ):
        check_satisfiable({"CPU": 16}, 1, "SPREAD", TWO_NODES)


def test_missing_resource_says_no_node_has_it():
    with pytest.raises(UnsatisfiableResourcesError, match=r"4 TPU.*no node .* has any TPU"):
        check_satisfiable({"TPU": 4}, 1, "SPREAD", TWO_NODES)


def test_whole_cluster_too_small():
    with pytest.raises(UnsatisfiableResourcesError, match=r"fit 3 in all"):
        check_satisfiable({"CPU": 4}, 4, "SPREAD", TWO_NODES)


def test_strict_strategies():
    with pytest.raises(UnsatisfiableResourcesError, match="STRICT_PACK"):
        check_satisfiable({"CPU": 4}, 3, "STRICT_PACK", TWO_NODES)
    with pytest.raises(UnsatisfiableResourcesError, match="STRICT_SPREAD needs 3 nodes"):
        check_satisfiable({"CPU": 1}, 3, "STRICT_SPREAD", TWO_NODES)


def test_no_nodes():
    with pytest.raises(UnsatisfiableResourcesError, match="no alive nodes"):
        check_satisfiable({"CPU": 1}, 1, "SPREAD", [])


class _Moving:
    """A Tune trial's slots as Ray's records show them, poll after poll: a bundle on a
    killed node, then unplaced (Ray rescheduling it), then on a live node."""

    def __init__(self, views):
        from raytf.group.slots import TrialSlots

        self.slots = object.__new__(TrialSlots)
        self.views = list(views)
        self.slots.placed = lambda: self.views.pop(0) if len(self.views) > 1 else self.views[0]


def test_a_tune_trial_waits_for_ray_to_move_its_slot_off_a_node_proven_gone():
    """A killed node reads alive until Ray's health checks fail (15 s by default) and the
    group's bundle on it reads placed: a restart that trusted it put rank 1 on the dead
    node and spent a second retry. Tune owns a trial's placement group, so raytf cannot
    reserve it again: it waits until the bundle is elsewhere."""
    import time

    waits = []
    moving = _Moving([{0: "a", 1: "dead"}, {0: "a"}, {0: "a", 1: "b"}])
    deadline = time.monotonic() + 30
    assert moving.slots._off_gone_nodes(2, {"dead"}, deadline, lambda w, s: waits.append(w))
    assert len(waits) == 2 and "off a node that stopped answering" in waits[0]
    assert moving.views == [{0: "a", 1: "b"}]
    # Nothing gone (a standby that died alone says nothing of its node): no wait at all.
    assert _Moving([{0: "a", 1: "a"}]).slots._off_gone_nodes(2, set(), deadline, None)
    # Still there at the deadline: not placed (the caller's timeout error says so).
    stuck = _Moving([{0: "a", 1: "dead"}])
    assert not stuck.slots._off_gone_nodes(2, {"dead"}, time.monotonic() + 0.6, lambda *_: None)


NODE = "9f" * 28  # Ray's node ids: 56 hex characters


def test_a_group_reserved_again_keeps_off_the_gone_nodes_with_selectors_ray_accepts():
    """A fixed group that lost a node is reserved again at once, not after Ray's health
    checks: survivors back on their nodes (their standbys wait there), the first lost
    slot on the reserve's node, any other lost slot anywhere but the gone nodes."""
    from ray._private.label_utils import validate_label_selector_value

    from raytf.group.slots import NODE_ID_LABEL, avoiding, steered

    a, dead, dead2, spare = NODE, "0a" * 28, "0b" * 28, "0c" * 28
    gone = {dead, dead2}
    out = steered(3, {0: a, 1: dead, 2: dead2}, gone, spare)
    assert out == [
        {NODE_ID_LABEL: f"in({a})"},
        {NODE_ID_LABEL: f"in({spare})"},
        {NODE_ID_LABEL: f"!in({dead},{dead2})"},
    ]
    assert avoiding(gone) == out[2]
    for selector in out:
        assert validate_label_selector_value(selector[NODE_ID_LABEL]) is None, selector


class _Actor:
    """A process as the pool holds it (only killed here: ray.kill of it fails quietly)."""

    def __init__(self, name):
        self.name = name


class _Reserve:
    def __init__(self, node, actor):
        self.node, self.actor = node, actor

    def take(self):
        actor, self.actor, self.node = self.actor, None, None
        return actor, f"ping of {actor.name}"


def test_a_group_reserved_again_hands_each_node_its_warm_process():
    """After a fixed group is reserved again off a dead node, each slot's bundle may be on
    another node: the standby pinned to a node goes to the slot now there, the reserve to
    the lost rank's slot on its node, the dead node's standby away, and no slot keeps the
    GPUs its old bundle held."""
    from raytf.group.pool import WorkerPool

    pool = object.__new__(WorkerPool)
    on_a, on_dead, spare = _Actor("on a"), _Actor("on dead"), _Actor("reserve")
    pool.standbys = {0: on_dead, 1: on_a}  # slot 1 was on node a, slot 0 on the dead node
    pool._standby_nodes = {0: "dead", 1: "a"}
    pool._first_ping = {0: "ping of on dead", 1: "ping of on a"}
    pool.spares = {}
    pool.bundle_gpu_ids = {0: ["0"], 1: ["1"]}
    pool.reserve = _Reserve("r", spare)
    pool.active = [0, 1]
    pool._slot_nodes = {0: "a", 1: "r"}  # the new bundles: slot 0 on a, slot 1 on r
    pool._follow_moved_slots({0, 1})
    assert pool.standbys == {0: on_a, 1: spare}
    assert pool._standby_nodes == {0: "a", 1: "r"}
    assert pool._first_ping == {0: "ping of on a", 1: "ping of reserve"}
    assert pool.bundle_gpu_ids == {} and pool.reserve.actor is None
    # Nothing moved (a restart on the same bundles): every process stays where it is.
    pool.bundle_gpu_ids = {0: ["0"]}
    pool._follow_moved_slots(set())
    assert pool.standbys == {0: on_a, 1: spare} and pool.bundle_gpu_ids == {0: ["0"]}


def test_a_moved_slot_on_no_known_node_takes_no_reserve():
    """A slot whose node is not known (not placed) is not the reserve's node, even when the
    group has no reserve running (its node None): no empty process is handed out."""
    from raytf.group.pool import WorkerPool

    pool = object.__new__(WorkerPool)
    pool.standbys, pool._standby_nodes, pool._first_ping, pool.spares = {}, {}, {}, {}
    pool.bundle_gpu_ids = {}
    pool.reserve = _Reserve(None, None)
    pool.active = [0, 1]
    pool._slot_nodes = {0: "a"}  # slot 1 not placed
    pool._follow_moved_slots({0, 1})
    assert pool.standbys == {} and pool._first_ping == {}
