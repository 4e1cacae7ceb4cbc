"""The run's record on disk: ``metrics.jsonl`` and ``logs/rank_<R>.log`` (``raytf.rundir.run_log``).

Fed by the controller through the callbacks' queue: every poll's reports
(every rank's, where the driver's history keeps rank 0's; past
``RECORDED_RANKS`` ranks, each other rank's in turn, so the file grows as that
many ranks' would: 1,024 ranks reporting every 100 steps wrote 17 MB in 10,000
steps, 16 times 64 ranks' 1 MB) and output lines,
and the run's commits, failures, restarts and end. Rank 0's reports go on to
TensorBoard and to Ray's metrics. A record keeper that fails (a full disk, a
bucket gone) costs its record, never the run: the callbacks' thread logs it,
and the keeper is tried again ``RETRY_KEEPER_S`` later (a disk that filled for
ten seconds must not end TensorBoard's record for the rest of the run).
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Any

from raytf.messages import WorkerPoll
from raytf.observe.append import AppendFile
from raytf.observe.ray_metrics import RayMetrics
from raytf.observe.tensorboard import TensorBoardWriter
from raytf.rundir.run_log import LOGS_DIR, RUN_LOG, rank_log_name
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")

RETRY_KEEPER_S = 15.0
RECORDED_RANKS = 64  # ranks whose every report is recorded; past that, in turn


class RunRecorder:
    """A driver callback: the controller emits to it as to the user's, and ``on_poll``
    (every rank's reports, where ``on_report`` has rank 0's) to it alone."""

    def __init__(self, storage: Storage, run_name: str):
        self.storage = storage
        self.events = AppendFile(storage, RUN_LOG)
        self.logs: dict[int, AppendFile] = {}
        self._log_attempt: dict[int, int] = {}
        self._total: int | None = None
        self._reports_of: dict[int, int] = {}  # this attempt's reports per rank (RECORDED_RANKS)
        self._attempt: int | None = None  # whose ranks _reports_of counts: a resize changes them
        self.tensorboard = TensorBoardWriter(storage)
        self.metrics = RayMetrics(run_name)
        self._paused_until: dict[str, float] = {}  # keeper -> when to try it again

    def _write(self, record_type: str, at: float | None = None, **fields: Any) -> None:
        doc = {"type": record_type, "time": round(at or time.time(), 3), **fields}
        self.events.write(json.dumps(doc, default=str, sort_keys=True) + "\n")

    # -- what the controller emits ---------------------------------------------
    def _recorded(self, rank: int) -> bool:
        """Rank 0's every report; past ``RECORDED_RANKS`` ranks, another rank's every
        k-th (k: ranks seen this attempt / RECORDED_RANKS, staggered by rank)."""
        seen = self._reports_of[rank] = self._reports_of.get(rank, 0) + 1
        turns = math.ceil(len(self._reports_of) / RECORDED_RANKS)
        return rank == 0 or turns <= 1 or (seen + rank) % turns == 0

    def on_poll(self, attempt: int, poll: WorkerPoll) -> None:
        if attempt != self._attempt:
            self._attempt, self._reports_of = attempt, {}
        for r in poll.reports:
            if not self._recorded(r.rank):
                continue
            step = r.metrics.get("step")
            self._write(
                "report", r.time, rank=r.rank, attempt=attempt, step=step,
                metrics=r.metrics, examples=r.examples,
            )  # fmt: skip
            if r.rank == 0:
                self._feed("tensorboard", lambda r=r: self.tensorboard.add(r))
                self._feed("metrics", lambda r=r: self.metrics.on_report(r, attempt))
        if poll.total_steps is not None and poll.total_steps != self._total:
            self._total = poll.total_steps
            self._write("total_steps", value=poll.total_steps)
        if poll.output:
            self._rank_log(poll.rank, attempt, poll.output)
        self.events.flush()

    def _feed(self, keeper: str, call) -> None:
        """One keeper failing (a full disk under TensorBoard's files, Ray's metrics) costs
        its own record only, never the event log's or the rank logs'; it is said, paused
        and tried again later (TensorBoard with a new event file)."""
        paused = self._paused_until.get(keeper)
        if paused is not None:
            if time.monotonic() < paused:
                return
            del self._paused_until[keeper]
            logger.warning("raytf's %s record: trying again", keeper)
        try:
            call()
        except Exception:  # noqa: BLE001 - said, then that keeper rests a while
            self._paused_until[keeper] = time.monotonic() + RETRY_KEEPER_S
            logger.exception(
                "raytf's %s record failed; trying again in %g s", keeper, RETRY_KEEPER_S
            )
            if keeper == "tensorboard":
                self.tensorboard.reset()

    def _rank_log(self, rank: int, attempt: int, lines: list[str]) -> None:
        log = self.logs.get(rank)
        if log is None:
            log = self.logs[rank] = AppendFile(self.storage, LOGS_DIR, rank_log_name(rank))
        if self._log_attempt.get(rank) != attempt:
            self._log_attempt[rank] = attempt
            log.write(f"--- attempt {attempt} ({time.strftime('%Y-%m-%d %H:%M:%S')}) ---\n")
        log.write("".join(line + "\n" for line in lines))
        log.flush()

    def on_commit(self, ckpt) -> None:
        """Every commit (raytf's own event: users' callbacks hear ``on_checkpoint``)."""
        self._write("checkpoint", step=ckpt.step, path=ckpt.path, commit_s=ckpt.commit_s)
        self._feed("metrics", self.metrics.on_checkpoint)
        self.events.flush()

    def on_failure(self, attempt: int, kind: str, error: BaseException) -> None:
        self._write("failure", attempt=attempt, kind=kind, error=f"{type(error).__name__}: {error}")
        self._feed("metrics", self.metrics.on_failure)
        self.events.flush()

    def on_restart(self, attempt: int) -> None:
        self._write("restart", attempt=attempt)
        self._feed("metrics", lambda: self.metrics.on_restart(attempt))
        self.events.flush()

    def on_run_end(self, state: str) -> None:
        self._write("end", state=state)
        for keeper in (self.events, *self.logs.values()):
            keeper.close()
        self._feed("tensorboard", self.tensorboard.close)
