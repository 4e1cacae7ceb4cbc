"""A warm process on a node outside a fixed group: where a lost node's rank restarts.

A fixed group that loses a node is reserved again off it (``raytf.group.slots``);
the survivors' standbys wait on their nodes, but the lost rank's slot lands on
another node, where nothing is warm: that rank pays a process start and
TensorFlow's import (5 s here, on a 2-core host running four simulated nodes)
while the others wait. Measured with Ray's default health checks
(``raytf bench node-loss``): kill to training 11.9 s median with the import, the
issue's goal is under 10 s.

The reserve is one zero-resource standby pinned to a node that has room for one
more of the group's bundles and holds none of them. When the group is reserved
again, the lost slot asks for the reserve's node first (a label selector) and
promotes the reserve there. What it costs and assumes:

- one idle process with TensorFlow imported (its memory, unaccounted by Ray: zero
  resources) on a node the run does not hold;
- the room may be taken by other work between the loss and the new reservation;
  the steered reservation then gives up after ``slots.STEER_S`` and the slot goes
  wherever Ray finds room, as without a reserve;
- the reserve is sought once standbys are due, then again every ``AGAIN_S``
  while there is none (a node that joins later gets one), through one query of
  every node's free resources.

Only fixed groups keep one: an elastic group goes on smaller at once and grows
back through warm spares, and a Tune trial's placement group is Tune's to keep.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import ray

from raytf.group.actors import kill_actor
from raytf.group.cluster import draining_nodes, nodes_with_room

logger = logging.getLogger("raytf")

AGAIN_S = 5.0  # how often a group without a reserve looks for a node to put one on


class Reserve:
    """At most one standby off the group's nodes; ``make`` starts one pinned to a node."""

    def __init__(self, make: Callable[[str], object]):
        self._make = make
        self.actor = None
        self.node: str | None = None
        self._first = None  # its first ping: answered once its process runs
        self._ping = None  # the newest ping: a process that died fails it
        self._looked = float("-inf")

    def keep(self, bundle: dict[str, float], group_nodes: set[str]) -> None:
        """At most every ``AGAIN_S``: end a reserve that died or whose node now holds one
        of the group's slots, and start one where a node has room and holds none."""
        if time.monotonic() - self._looked < AGAIN_S:
            return
        self._looked = time.monotonic()
        if self.actor is not None:
            if self.node not in group_nodes and self._alive():
                return
            self.drop()
        leaving = draining_nodes()
        nodes = [n for n in nodes_with_room(bundle) if n not in group_nodes and n not in leaving]
        if nodes:
            self.node = nodes[0]
            self.actor = self._make(self.node)
            self._first = self._ping = self.actor.ping.remote()

    def warm_node(self, gone: set[str]) -> str | None:
        """The reserve's node, if its process has answered and neither it nor its node is
        known gone."""
        if self.actor is None or self.node in gone or not self._alive():
            return None
        return self.node if ray.wait([self._first], timeout=0)[0] else None

    def _alive(self) -> bool:
        """False once a ping failed; a ping that answered is followed by a new one (the
        next look's evidence), one not answered yet is no evidence."""
        if not ray.wait([self._ping], timeout=0)[0]:
            return True
        try:
            ray.get(self._ping)
        except Exception:  # noqa: BLE001 - dead, or its node: look for another node
            return False
        self._ping = self.actor.ping.remote()
        return True

    def take(self) -> tuple[object, object]:
        """The reserve's process and its first ping: now a standby of the slot placed on
        its node."""
        actor, first = self.actor, self._first
        self.actor, self.node, self._first, self._ping = None, None, None, None
        self._looked = float("-inf")  # the next keep() looks for a new one at once
        return actor, first

    def drop(self) -> None:
        if self.actor is not None:
            kill_actor(self.actor)
        self.actor, self.node, self._first, self._ping = None, None, None, None
