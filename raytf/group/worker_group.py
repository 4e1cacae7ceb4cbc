"""One RaytfWorker actor per rank, wired into one MWMS, started and ended as a unit.

A group lives exactly as long as one MWMS: a strategy cannot be re-made in a
live process, so any failure (or a port clash at start-up) ends the whole group
and the driver starts a new one, new processes and new ports included. The
placement group and the standby processes belong to the ``WorkerPool``, which
outlives the attempts.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import ray
from ray.exceptions import RayActorError, RayTaskError

from raytf import compat
from raytf.config import ScalingConfig
from raytf.errors import (
    DependencyError,
    PortClashError,
    UserCodeLoadError,
    WorkerDiedError,
    WorkerSetupError,
)
from raytf.group.actors import kill_actor
from raytf.group.cluster import draining_nodes
from raytf.group.elastic import WorldSize
from raytf.group.pool import WorkerPool
from raytf.group.tf_config import tf_config_jsons
from raytf.group.timeline import Timeline
from raytf.messages import CheckpointPlan, Command, SetupReply, WorkerInfo, WorkerPoll
from raytf.worker.process.devices import collective_implementation

logger = logging.getLogger("raytf")


# A round asks about this many ranks that have nothing urgent to say (poll_hold_s).
POLLS_PER_ROUND = 64


def poll_hold_s(world_size: int, interval_s: float, rank: int, round_: int) -> float:
    """How long ``rank``'s poll, sent in round ``round_``, may be held: 0 for the chief
    and for every rank up to ``POLLS_PER_ROUND`` ranks (each answers every round, as
    always); past that, until the next round of its turn, turns taken by rank modulo
    ``world_size / POLLS_PER_ROUND``, so about that many answer per round, not all at
    once (a commit wakes every rank: the turns bring them apart again). 1,024 ranks:
    a turn every 16 rounds, 3.2 s."""
    turns = math.ceil(world_size / POLLS_PER_ROUND)
    if rank == 0 or turns <= 1:
        return 0.0
    return interval_s * ((rank - round_) % turns or turns)


def unanswered_for(asked: dict[int, float], listened: float, for_s: float) -> list[int]:
    """The ranks whose poll, sent at ``asked[rank]``, was still unanswered when the
    driver last listened (``listened``) ``for_s`` seconds or more later."""
    return sorted(r for r, sent in asked.items() if listened - sent >= for_s)


class WorkerGroup:
    """One attempt's actors, wired into one MWMS; its pool outlives it."""

    def __init__(self, scaling: ScalingConfig, *, pool: WorkerPool, attempt: int):
        self.scaling = scaling
        self.pool = pool
        self.attempt = attempt
        self.actors: list = []
        self.promoted = 0
        self.infos: list[WorkerInfo] = []
        self._inflight: list = []
        self._sent_at: list[float] = []  # when each rank's outstanding poll is due to answer
        self._held: list[bool] = []  # each rank's outstanding poll is held (poll_hold_s)
        self._round = 0  # polls sent this attempt: whose turn it is (poll_hold_s)
        self._listened = 0.0  # when the driver last waited for answers
        self.timeline = Timeline()

    # -- start-up ---------------------------------------------------------
    def place(self, timeout_s: float, on_wait: Callable[[str, float], None]) -> WorldSize:
        self.timeline.mark("scheduling")
        size = self.pool.place(timeout_s, on_wait)
        self.timeline.mark("placed")
        return size

    def start_actors(self) -> None:
        pairs = self.pool.actors_for_ranks()
        self.timeline.mark("actors_ready")
        self.actors = [actor for actor, _ in pairs]
        self.promoted = sum(1 for _, promoted in pairs if promoted)

    def setup(self, timeout_s: float) -> int:
        """Wire the actors into one MWMS. Raises PortClashError or WorkerSetupError."""
        t0 = time.monotonic()
        self.infos = self._get_all([a.reserve.remote() for a in self.actors], timeout_s, "start")
        if [info.rank for info in self.infos] != list(range(len(self.actors))):
            raise WorkerSetupError(f"workers report ranks {[i.rank for i in self.infos]}")
        logger.debug("ports reserved in %.3f s", time.monotonic() - t0)
        addresses = [(info.node_ip, info.port) for info in self.infos]
        impl = collective_implementation(self.scaling.use_gpu)
        configs = tf_config_jsons(addresses)
        refs = [actor.setup.remote(configs[rank], impl) for rank, actor in enumerate(self.actors)]
        replies = self._get_all(refs, timeout_s, "create the strategy")
        logger.debug("strategy created in %.3f s", time.monotonic() - t0)
        where = [f"{info.hostname} ({info.node_ip})" for info in self.infos]
        for rank, reply in enumerate(replies):
            if not isinstance(reply, SetupReply):  # an older raytf on that node
                raise DependencyError(
                    f"rank {rank} on {where[rank]} runs another raytf than the driver "
                    f"({compat.DISTRIBUTION}: its set-up answered {reply!r}); let the driver "
                    "ship its package (RAYTF_SHIP_PACKAGE) or install the same raytf there"
                )
        error = compat.other_build([getattr(r, "source", None) for r in replies], where)
        error = error or compat.disagreement([r.probes for r in replies], where)
        if error is not None:
            raise error
        self.timeline.mark("group_created")
        return replies[0].replicas

    def _get_all(self, refs: list, timeout_s: float, what: str) -> list:
        deadline = time.monotonic() + timeout_s
        pending = list(refs)
        rank_of = {ref: rank for rank, ref in enumerate(refs)}  # not refs.index: O(N^2)
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                ranks = sorted(rank_of[r] for r in pending)
                raise WorkerSetupError(
                    f"ranks {ranks} did not {what} within {timeout_s:.0f} s "
                    "(RunConfig.setup_timeout_s)"
                )
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=min(remaining, 1.0))
            for ref in done:
                self._raise_setup_error(ref, rank_of[ref], what)
        return ray.get(list(refs))

    @staticmethod
    def _raise_setup_error(ref, rank: int, what: str) -> None:
        try:
            ray.get(ref)
        except RayTaskError as exc:
            cause = exc.as_instanceof_cause()
            if isinstance(cause, PortClashError):
                raise PortClashError(str(cause)) from None
            if isinstance(cause, DependencyError):
                raise DependencyError(str(cause)) from None
            raise WorkerSetupError(f"rank {rank} could not {what}: {exc}") from None
        except RayActorError as exc:
            raise WorkerSetupError(f"rank {rank} died while trying to {what}: {exc}") from None

    # -- running ------------------------------------------------------------
    def run(
        self, fn_ref, config: dict, run_dir: str, ckpt: CheckpointPlan, shards: list | None = None
    ) -> None:
        """Start the user's function on every rank; ``shards[rank]`` is its Ray Data input."""
        local_ranks = self._local_ranks()
        # The function put anew, on the driver's node alone: Ray still lists the copy a
        # dead node pulled in an earlier attempt until its health checks fail, and a
        # new node that pulled from it stalled 10 s (a lost node's restart, measured).
        fn_ref = ray.put(ray.get(fn_ref)) if isinstance(fn_ref, ray.ObjectRef) else fn_ref
        refs = [
            actor.start.remote(
                fn_ref, config, run_dir, local_ranks[rank], ckpt, shards[rank] if shards else None
            )
            for rank, actor in enumerate(self.actors)
        ]
        try:
            ray.get(refs)
        except RayTaskError as exc:
            raise UserCodeLoadError(
                f"the workers could not start train_loop_per_worker: {_first_line(exc.cause)}. "
                "Define it in the job script, or ship its module to the cluster "
                "(runtime_env working_dir or py_modules)."
            ) from None
        except RayActorError as exc:
            raise WorkerSetupError(f"a worker died while starting: {_first_line(exc)}") from None
        self._inflight = [None] * len(self.actors)
        self._sent_at = [0.0] * len(self.actors)
        self._held = [False] * len(self.actors)
        self._round = 0
        self._listened = 0.0
        self.timeline.mark("loops_started")

    def _local_ranks(self) -> list[int]:
        seen: dict[str, int] = {}
        out = []
        for info in self.infos:
            out.append(seen.get(info.node_id, 0))
            seen[info.node_id] = out[-1] + 1
        return out

    def poll(self, wait_s: float, hold: bool = True) -> list[WorkerPoll | WorkerDiedError | None]:
        """One answer per rank: a WorkerPoll, WorkerDiedError, or None (no answer yet).

        A rank that has not answered keeps its poll outstanding instead of being
        asked again, so a hung (e.g. SIGSTOPped) worker never stalls the driver.
        Past ``POLLS_PER_ROUND`` ranks, every rank but the chief holds its answer
        until it has news (a checkpoint part, its loop's end, a reply) or its turn
        (``poll_hold_s``): a round then takes about that many answers, not one per
        rank, and a death still shows at once (its outstanding call fails).
        ``hold=False``: listen to every outstanding poll, held ones too, for up to
        ``wait_s``, and ask no rank to hold (``root_cause``'s look for the dead rank
        behind a broken collective: its call fails within that wait).
        """
        self._round += 1
        for rank, actor in enumerate(self.actors):
            if self._inflight[rank] is None:
                held = poll_hold_s(len(self.actors), wait_s, rank, self._round) if hold else 0.0
                self._inflight[rank] = actor.poll.remote(held) if held else actor.poll.remote()
                self._sent_at[rank] = time.monotonic() + held  # when an answer is due
                self._held[rank] = bool(held)
        now_due = [
            r for r, h in zip(self._inflight, self._held) if r is not None and (not h or not hold)
        ]
        ready, _ = ray.wait(now_due, num_returns=len(now_due), timeout=wait_s)
        held_refs = [r for r, h in zip(self._inflight, self._held) if r is not None and h and hold]
        if held_refs:
            ready += ray.wait(held_refs, num_returns=len(held_refs), timeout=0)[0]
        self._listened = time.monotonic()
        answers = self._get_ready(ready)
        out: list[WorkerPoll | WorkerDiedError | None] = []
        for rank, ref in enumerate(self._inflight):
            if ref not in answers:
                out.append(None)
                continue
            answer = answers[ref]
            if isinstance(answer, RayActorError):
                answer = WorkerDiedError(rank, _first_line(answer))
            elif isinstance(answer, WorkerPoll):
                self.timeline.add_rank(rank, answer.startup)
            out.append(answer)
            self._inflight[rank] = None
        return out

    @staticmethod
    def _get_ready(ready: list) -> dict:
        """Answers of the ready refs, one ``ray.get`` for all (one call a round, not one
        per worker); a dead actor's ref maps to its RayActorError."""
        try:
            return dict(zip(ready, ray.get(ready)))
        except RayActorError:
            out = {}
            for ref in ready:
                try:
                    out[ref] = ray.get(ref)
                except RayActorError as exc:
                    out[ref] = exc
            return out

    def silent_ranks(self, for_s: float) -> list[int]:
        """Ranks whose outstanding poll went unanswered for ``for_s`` seconds of the
        driver listening: from when it was sent to the driver's last wait for answers.
        Not to the present: a driver that stalled after that wait (a commit's write to
        a storage endpoint that went away for 8 s, seen in a test) did not hear, and
        would otherwise take every rank it did not ask for silent."""
        asked = {r: self._sent_at[r] for r, ref in enumerate(self._inflight) if ref is not None}
        return unanswered_for(asked, self._listened, for_s)

    def request_checkpoint(self, reason: str) -> None:
        """Ask the chief to have the whole group save at the next step boundary."""
        if self.actors:
            self.actors[0].request_checkpoint.remote(reason)

    def emergency_checkpoint(
        self, ranks: list[int], timeout_s: float, committed: int | None = None
    ) -> dict[int, object]:
        """Each surviving rank's emergency part (a CheckpointPart) or why it has none;
        ``committed``: the newest committed step, which no survivor may write into."""
        writer = min(ranks)  # one survivor writes the TF files: every copy is the same
        actors = {r: self.actors[r] for r in ranks}
        refs = {r: a.emergency_checkpoint.remote(r == writer, committed) for r, a in actors.items()}
        ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        out: dict[int, object] = {}
        for rank, ref in refs.items():
            try:
                out[rank] = ray.get(ref, timeout=0)
            except Exception as exc:  # noqa: BLE001 - gone or too slow: no part from it
                out[rank] = f"no answer in {timeout_s:g} s ({type(exc).__name__})"
        return out

    def send_command(self, command: Command) -> None:
        """One command of an interactive session, to every rank in the same order."""
        for actor in self.actors:
            actor.command.remote(command)

    def draining_nodes(self) -> dict[str, float]:
        """This group's nodes that Ray is draining -> their deadlines (Unix seconds)."""
        mine = {info.node_id for info in self.infos}
        return {n: t for n, t in draining_nodes().items() if n in mine}

    # -- tear-down ----------------------------------------------------------
    def shutdown(self) -> None:
        """Kill every actor of this attempt, and with it its TF server."""
        for actor in self.actors:
            kill_actor(actor)
        self.actors = []
        if self.infos:
            self.pool.remember_gpus(self.infos)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
