"""The run's record on disk: ``metrics.jsonl`` and ``logs/rank_<R>.log`` (``raytf.rundir.run_log``).

Fed by the controller through the callbacks' queue: every poll's reports
(every rank's, where the driver's history keeps rank 0's) and output lines,
and the run's commits, failures, restarts and end. Rank 0's reports go on to
TensorBoard and to Ray's metrics. A record keeper that fails (a full disk, a
bucket gone) costs its record, never the run: the callbacks' thread logs it.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from raytf.messages import WorkerPoll
from raytf.observe.append import AppendFile
from raytf.observe.ray_metrics import RayMetrics
from raytf.observe.tensorboard import TensorBoardWriter
from raytf.rundir.run_log import LOGS_DIR, RUN_LOG, rank_log_name
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")


class RunRecorder:
    """A driver callback: the controller emits to it as to the user's, and ``on_poll``
    (every rank's reports, where ``on_report`` has rank 0's) to it alone."""

    def __init__(self, storage: Storage, run_name: str):
        self.storage = storage
        self.events = AppendFile(storage, RUN_LOG)
        self.logs: dict[int, AppendFile] = {}
        self._log_attempt: dict[int, int] = {}
        self._total: int | None = None
        self.tensorboard = TensorBoardWriter(storage)
        self.metrics = RayMetrics(run_name)
        self._broken: set[str] = set()

    def _write(self, record_type: str, at: float | None = None, **fields: Any) -> None:
        doc = {"type": record_type, "time": round(at or time.time(), 3), **fields}
        self.events.write(json.dumps(doc, default=str, sort_keys=True) + "\n")

    # -- what the controller emits ---------------------------------------------
    def on_poll(self, attempt: int, poll: WorkerPoll) -> None:
        for r in poll.reports:
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
        """One keeper failing (a broken tensorboardX, Ray's metrics) costs its own record
        only, once said, never the event log's or the rank logs'."""
        if keeper in self._broken:
            return
        try:
            call()
        except Exception:  # noqa: BLE001 - said once, then that keeper is left alone
            self._broken.add(keeper)
            logger.exception("raytf's %s record stops here", keeper)

    def _rank_log(self, rank: int, attempt: int, lines: list[str]) -> None:
        log = self.logs.get(rank)
        if log is None:
            log = self.logs[rank] = AppendFile(self.storage, LOGS_DIR, rank_log_name(rank))
        if self._log_attempt.get(rank) != attempt:
            self._log_attempt[rank] = attempt
            log.write(f"--- attempt {attempt} ({time.strftime('%Y-%m-%d %H:%M:%S')}) ---\n")
        log.write("".join(line + "\n" for line in lines))
        log.flush()

    def on_checkpoint(self, step: int, path: str) -> None:
        self._write("checkpoint", step=step, path=path)
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
