"""The seams between the driver and the worker group: what the controller calls, and nothing more.

``WorkerGroup`` and ``WorkerPool`` implement these; so do the controller
tests' fakes, and a unit test holds all of them to these signatures, so a
fake cannot drift from the real thing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from raytf.errors import WorkerDiedError
from raytf.group.elastic import WorldSize
from raytf.group.timeline import Timeline
from raytf.messages import CheckpointPlan, Command, WorkerInfo, WorkerPoll


class Pool(Protocol):
    """The slots and spare processes a run keeps across attempts."""

    lost_nodes: set[str]

    def add_standbys(self) -> None: ...

    def keep_reserve(self) -> None: ...

    def growth(self) -> tuple[WorldSize, list[int]] | None: ...

    def warm_spares(self, slots: list[int]) -> bool: ...

    def evict(self, node_ids: set[str]) -> list[int]: ...

    def close(self) -> None: ...


class Group(Protocol):
    """One attempt's actors, wired into one MWMS."""

    infos: list[WorkerInfo]
    promoted: int
    timeline: Timeline  # this attempt's start-up, as state.json's ``startup`` shows it

    def place(self, timeout_s: float, on_wait: Callable[[str, float], None]) -> WorldSize: ...

    def start_actors(self) -> None: ...

    def setup(self, timeout_s: float) -> int: ...

    def run(
        self,
        fn_ref: Any,
        config: dict,
        run_dir: str,
        ckpt: CheckpointPlan,
        shards: list | None = None,
    ) -> None: ...

    def poll(
        self, wait_s: float, hold: bool = True
    ) -> list[WorkerPoll | WorkerDiedError | None]: ...

    def silent_ranks(self, for_s: float) -> list[int]: ...

    def request_checkpoint(self, reason: str) -> None: ...

    def emergency_checkpoint(
        self, ranks: list[int], timeout_s: float, committed: int | None = None
    ) -> dict[int, object]: ...

    def send_command(self, command: Command) -> None: ...

    def draining_nodes(self) -> dict[str, float]: ...

    def shutdown(self) -> None: ...
