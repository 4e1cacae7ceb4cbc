"""Where workers may run: the run's placement-group reservations, one slot per worker.

A fixed-size group reserves all its slots in one placement group, so Ray's
placement strategy (SPREAD, PACK, ...) covers the whole group and the
reservation is all or nothing. An elastic group reserves each slot in a
placement group of its own: slots then come and go one at a time. A slot
whose node dies goes back to pending and Ray places it again as soon as a
node has room (a node joins, the autoscaler adds one, which it does on its
own for pending placement groups); the pool runs on the slots that are
placed. The placement strategy then applies within each slot only.

Both keep their reservations across attempts: a restart does not give the
cluster a chance to hand the room to someone else. The exception is a node
proven gone (its raylet refuses, or Ray lost it): a killed node reads alive in
Ray's records, its bundles placed, until Ray's health checks fail (15 s with
Ray's defaults), and only then does Ray move them. The slots on it are
reserved again at once, with a label selector that keeps them off the gone
nodes: a fixed group's whole placement group (one group, one strategy), an
elastic group's lost slots alone. The standbys are pinned to their nodes, not
to the bundles (``raytf.group.pool``), so the survivors keep theirs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from raytf.config import ScalingConfig
from raytf.errors import ConfigError, PlacementTimeoutError
from raytf.group import autoscaler as autoscaling
from raytf.group.cluster import alive_node_ids, draining_nodes
from raytf.group.elastic import WorldSize, choose_world_size

logger = logging.getLogger("raytf")

WAIT_POLL_S = 0.5
STEER_S = 3.0  # how long a reservation steered to the survivors' and a warm node may take
NODE_ID_LABEL = "ray.io/node-id"  # Ray's own label on every node


def avoiding(nodes: set[str] | frozenset[str]) -> dict[str, str]:
    """A bundle's label selector that keeps it off these nodes (node ids are 56 hex
    characters: Ray's label values allow 63)."""
    return {NODE_ID_LABEL: "!in(" + ",".join(sorted(nodes)) + ")"}


def bundle_label(bundle: dict[str, float], count: int) -> str:
    inner = ", ".join(f"{k}: {v:g}" for k, v in sorted(bundle.items()))
    return f"{count} x {{{inner}}}"


def steered(n: int, before: dict[int, str], gone: set[str], toward: str) -> list[dict[str, str]]:
    """Each bundle's selector for a group reserved again after a node loss: a surviving
    slot on its node again (its standby waits there), the first lost slot on ``toward``,
    any other off the nodes ``gone``."""
    selectors = []
    for slot in range(n):
        node = before.get(slot)
        if node is not None and node not in gone:
            selectors.append({NODE_ID_LABEL: f"in({node})"})
        elif toward is not None:
            selectors.append({NODE_ID_LABEL: f"in({toward})"})
            toward = None
        else:
            selectors.append(avoiding(gone))
    return selectors


class _AutoscalerAsk:
    """Ask the autoscaler for the whole group once placement has waited a second, if one
    can add nodes; withdraw the request when placed or given up."""

    def __init__(self, bundle: dict[str, float], count: int):
        self.bundles = [dict(bundle) for _ in range(count)]
        self.asked = self.requested = False

    def maybe_ask(self) -> bool:
        if not self.asked:
            self.asked = True
            if autoscaling.autoscaler_running():
                autoscaling.request(self.bundles)
                self.requested = True
                return True
        return False

    def withdraw(self) -> None:
        if self.requested:
            autoscaling.request([])
            self.requested = False


class _OneGroup:
    """Slots that are the bundles of one placement group (``pg``), slot i = bundle i."""

    pg = None

    def strategy(self, slot: int) -> PlacementGroupSchedulingStrategy:
        return PlacementGroupSchedulingStrategy(
            placement_group=self.pg, placement_group_bundle_index=slot
        )

    def placed(self) -> dict[int, str]:
        """Slot -> node, as Ray placed the bundles."""
        if self.pg is None:
            return {}
        return dict(placement_group_table(self.pg).get("bundles_to_node_id", {}))


class FixedSlots(_OneGroup):
    """All slots in one placement group: placed together, strategy across the group."""

    def __init__(self, scaling: ScalingConfig, name: str):
        self.scaling = scaling
        self.name = name
        self.bundle = scaling.worker_resources()
        self.pg = None
        self.moved: set[int] = set()  # slots whose bundles the last place made anew

    def place(
        self, timeout_s: float, on_wait, usable=None, gone=frozenset(), settle=False, toward=None
    ) -> tuple[list[int], WorldSize]:
        """Reserve every worker's resources at once, or time out. After a node loss the
        whole group is reserved again off the nodes ``gone`` (one placement group keeps
        one strategy across the group), without waiting for Ray to declare them dead:
        first asking for the survivors' nodes again and, for a lost slot, the node
        ``toward`` (where a warm process waits: ``raytf.group.reserve``)."""
        n = self.scaling.num_workers
        self.moved = set()
        before = self.placed() if self.pg is not None else {}
        # On a gone node, or unplaced (Ray's health checks found the node dead first,
        # and it reschedules the bundle wherever it likes): reserve the group again.
        if before and gone and (set(before.values()) & set(gone) or len(before) < n):
            _remove(self.pg)
            self.pg = None
            if toward is not None and self.scaling.placement_strategy != "STRICT_PACK":
                self.pg = self._steered(before, set(gone), toward)
        if self.pg is None:
            self.pg = self._new([avoiding(gone) for _ in range(n)] if gone else None)
        ready = self.pg.ready()
        start = time.monotonic()
        label = bundle_label(self.bundle, n)
        ask = _AutoscalerAsk(self.bundle, n)
        while True:
            done, _ = ray.wait([ready], timeout=1.0)
            if done:
                ask.withdraw()  # placed: let idle nodes go when the run ends
                return list(range(n)), WorldSize(n)
            if ask.maybe_ask():
                label += " (asked the autoscaler)"
            waited = time.monotonic() - start
            if waited >= timeout_s:
                ask.withdraw()
                raise PlacementTimeoutError(
                    f"waited {waited:.0f} s for {label} and the cluster never had room: "
                    "other work holds the resources or the autoscaler added no nodes "
                    "(RunConfig.placement_timeout_s sets the wait)"
                )
            on_wait(f"waiting for {label}", waited)

    def _new(self, selectors: list[dict[str, str]] | None):
        self.moved = set(range(self.scaling.num_workers))
        return placement_group(
            [dict(self.bundle) for _ in range(self.scaling.num_workers)],
            strategy=self.scaling.placement_strategy,
            name=f"raytf:{self.name}",
            bundle_label_selector=selectors,
        )

    def _steered(self, before: dict[int, str], gone: set[str], toward: str):
        """The group on the survivors' nodes and ``toward``, if Ray places it within
        ``STEER_S`` (else None: another job took the room)."""
        pg = self._new(steered(self.scaling.num_workers, before, gone, toward))
        if ray.wait([pg.ready()], timeout=STEER_S)[0]:
            return pg
        logger.info("raytf: the survivors' nodes and the reserve's had no room: placing anywhere")
        _remove(pg)
        return None

    def evict(self, node_ids: set[str]) -> list[int]:
        """Move off draining nodes: a group-wide strategy means re-placing the whole group."""
        on = [s for s, node in self.placed().items() if node in node_ids]
        if on:
            self.close()
        return on

    def close(self) -> None:
        if self.pg is not None:
            _remove(self.pg)
            self.pg = None


class TrialSlots(_OneGroup):
    """A Ray Tune trial's placement group: Tune reserved it (one bundle per worker, the
    trial's own actor outside it) and removes it when the trial ends; raytf only uses it."""

    def __init__(self, scaling: ScalingConfig, pg):
        bundle = scaling.worker_resources()
        # The workers' bundles come first; one after them is Ray Data's (raytf.integrations.tune).
        specs = [{k: v for k, v in b.items() if v} for b in pg.bundle_specs]
        workers = specs[: scaling.num_workers]
        if len(workers) != scaling.num_workers or any(b != bundle for b in workers):
            raise ConfigError(
                f"the trial's placement group holds {specs}, not {scaling.num_workers} x "
                f"{bundle}: give the trainable raytf's resource request "
                "(raytf.integrations.tune.trainable or Trainer.as_trainable set it)"
            )
        self.pg = pg
        self.n = scaling.num_workers

    moved: frozenset[int] = frozenset()  # Tune's bundles: never made anew by raytf

    def _off_gone_nodes(self, n: int, gone: set[str], deadline: float, on_wait) -> bool:
        """Wait (until ``deadline``) for every slot to be placed off the nodes ``gone``
        (their raylet refuses, or Ray's records lost them); False at the deadline. A
        Tune trial's placement group is Tune's: raytf cannot reserve it again, so a
        restart waits for Ray to move the bundles, which it does once its health checks
        declare the node dead. A restart that trusted the bundles on a killed node put
        a worker there and spent a second retry."""
        if not gone:
            return True
        start = time.monotonic()
        while True:
            placed = self.placed()
            if len(placed) == n and not set(placed.values()) & gone:
                return True
            if time.monotonic() >= deadline:
                return False
            on_wait("waiting for Ray to move the slots off a node that stopped answering",
                    time.monotonic() - start)  # fmt: skip
            time.sleep(0.5)

    def place(
        self, timeout_s: float, on_wait, usable=None, gone=frozenset(), settle=False, toward=None
    ) -> tuple[list[int], WorldSize]:
        deadline = time.monotonic() + timeout_s
        done, _ = ray.wait([self.pg.ready()], timeout=timeout_s)
        if not done or not self._off_gone_nodes(self.n, set(gone), deadline, on_wait):
            raise PlacementTimeoutError(f"the trial's placement group not ready in {timeout_s} s")
        return list(range(self.n)), WorldSize(self.n)

    def evict(self, node_ids: set[str]) -> list[int]:
        return []  # Tune owns the reservation: the restart stays in it

    def close(self) -> None:
        pass  # Tune removes it with the trial


class ElasticSlots:
    """One placement group per slot: each slot is placed, lost and placed again on its own."""

    def __init__(self, scaling: ScalingConfig, name: str):
        self.scaling = scaling
        self.name = name
        self.bundle = scaling.worker_resources()
        self.pgs: list = [None] * scaling.max_workers
        self.moved: set[int] = set()  # slots whose bundles the last place made anew

    def strategy(self, slot: int) -> PlacementGroupSchedulingStrategy:
        return PlacementGroupSchedulingStrategy(
            placement_group=self.pgs[slot], placement_group_bundle_index=0
        )

    def _ensure(self, gone: set[str] | frozenset[str] = frozenset()) -> None:
        for slot, pg in enumerate(self.pgs):
            if pg is None:
                self.pgs[slot] = placement_group(
                    [dict(self.bundle)],
                    strategy=self.scaling.placement_strategy,
                    name=f"raytf:{self.name}:slot{slot}",
                    bundle_label_selector=[avoiding(gone)] if gone else None,
                )
                self.moved.add(slot)

    def _leave(self, gone: set[str]) -> None:
        """Reserve again, off the nodes ``gone``, the slots Ray still places on them (it
        moves them itself only once its health checks declare the node dead)."""
        if not gone:
            return
        table = placement_group_table()
        for slot, pg in enumerate(self.pgs):
            node = table.get(pg.id.hex(), {}).get("bundles_to_node_id", {}).get(0) if pg else None
            if node in gone:
                _remove(pg)
                self.pgs[slot] = None
        self._ensure(gone)

    def placed(self) -> dict[int, str]:
        """Slot -> node for slots placed on a live node that is not draining."""
        self._ensure()
        table = placement_group_table()
        alive = alive_node_ids()
        leaving = draining_nodes()
        out = {}
        for slot, pg in enumerate(self.pgs):
            entry = table.get(pg.id.hex(), {})
            node = entry.get("bundles_to_node_id", {}).get(0)
            if entry.get("state") == "CREATED" and node in alive and node not in leaving:
                out[slot] = node
        return out

    def place(
        self,
        timeout_s: float,
        on_wait: Callable[[str, float], None],
        usable: Callable[[dict[int, str]], list[int]],
        gone: set[str] = frozenset(),
        settle: bool = False,
        toward: str | None = None,
    ) -> tuple[list[int], WorldSize]:
        """The slots to run on: as many as can be had (up to max), once at least min can.

        At the start, waits up to ``elastic_wait_s`` for the best size before settling
        for fewer; a restart (``settle``) goes on at once with what ``usable`` gives,
        and slots that come later join through growth (which warms their processes
        first), so a lost node's slot never holds the survivors up. Waits up to
        ``timeout_s`` for ``min``. ``usable`` filters the placed slots (the pool drops
        slots whose processes do not answer, and at a restart keeps the warm ones).
        """
        s = self.scaling
        self.moved = set()
        self._leave(set(gone))
        best = choose_world_size(s, s.max_workers)
        start = time.monotonic()
        ask = _AutoscalerAsk(self.bundle, s.max_workers)
        extra = ""
        while True:
            slots = usable(self.placed())
            size = choose_world_size(s, len(slots))
            waited = time.monotonic() - start
            if size is not None and (size == best or settle or waited >= s.elastic_wait_s):
                ask.withdraw()
                return slots[: size.workers], size
            if waited >= 1.0 and ask.maybe_ask():
                extra = " (asked the autoscaler)"
            if waited >= timeout_s:
                ask.withdraw()
                raise PlacementTimeoutError(
                    f"waited {waited:.0f} s and could place {len(slots)} of the at least "
                    f"{s.min_workers} workers ScalingConfig.num_workers = {s.num_workers} "
                    f"needs ({bundle_label(self.bundle, 1)} each){extra}: other work holds "
                    "the resources or the nodes are gone (RunConfig.placement_timeout_s "
                    "sets the wait)"
                )
            want = s.min_workers if size is None else s.max_workers
            on_wait(f"{len(slots)} of {want} workers placed{extra}", waited)
            time.sleep(WAIT_POLL_S)

    def evict(self, node_ids: set[str]) -> list[int]:
        """Give up the slots on draining nodes; they wait for room elsewhere."""
        if not node_ids:
            return []
        table = placement_group_table()
        out = []
        for slot, pg in enumerate(self.pgs):
            node = table.get(pg.id.hex(), {}).get("bundles_to_node_id", {}).get(0)
            if node in node_ids:
                _remove(pg)
                self.pgs[slot] = None
                out.append(slot)
        self._ensure()
        return out

    def close(self) -> None:
        for pg in self.pgs:
            if pg is not None:
                _remove(pg)
        self.pgs = [None] * len(self.pgs)


def make_slots(
    scaling: ScalingConfig, name: str, placement_group=None
) -> FixedSlots | ElasticSlots | TrialSlots:
    if placement_group is not None:
        return TrialSlots(scaling, placement_group)
    return ElasticSlots(scaling, name) if scaling.is_elastic else FixedSlots(scaling, name)


def _remove(pg) -> None:
    try:
        remove_placement_group(pg)
    except Exception as exc:  # noqa: BLE001 - already gone is fine
        logger.debug("remove_placement_group failed: %s", exc)
