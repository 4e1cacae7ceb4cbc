"""The driver's states, the transitions between them, and what a transition carries.

``TRANSITIONS`` is the controller's diagram as data: the loop refuses a step
it does not list, and a unit test holds the controller's docstring to it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from raytf.driver.failure_policy import Failure
from raytf.driver.resize_policy import Restart


class State(enum.Enum):
    SCHEDULING = "SCHEDULING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    FINISHED = "FINISHED"
    ERRORED = "ERRORED"
    STOPPED = "STOPPED"

    @property
    def is_terminal(self) -> bool:
        return self in (State.FINISHED, State.ERRORED, State.STOPPED)


S = State
TRANSITIONS: dict[State, frozenset[State]] = {
    S.SCHEDULING: frozenset({S.STARTING, S.RESTARTING, S.ERRORED}),
    S.STARTING: frozenset({S.RUNNING, S.SCHEDULING, S.RESTARTING, S.ERRORED}),
    S.RUNNING: frozenset({S.RUNNING, S.RESTARTING, S.FINISHED, S.ERRORED}),
    S.RESTARTING: frozenset({S.SCHEDULING, S.ERRORED}),
}


@dataclass(frozen=True)
class Next:
    """The state to go to; RESTARTING carries why."""

    state: State
    reason: Failure | Restart | None = None


def outranking(a: Restart | None, b: Restart | None) -> Restart | None:
    """A preemption's restart outranks a resize's: the node is going away."""
    return Restart.PREEMPTION if Restart.PREEMPTION in (a, b) else (a or b)
