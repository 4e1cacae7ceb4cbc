"""TensorBoard event files on the driver, for any training loop, without TensorFlow.

Keras's TensorBoard callback writes from inside a Keras loop on the chief;
this writes what every loop reports (rank 0's numeric metrics, by step and
wall time) to ``RUN_DIR/tensorboard``, with tensorboardX (pure Python and
protobuf: importing it costs the driver ~0.2 s, TensorFlow 5 s). On an
object store the files are written locally and uploaded when flushed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from raytf.messages import Report
from raytf.rundir.run_log import TENSORBOARD_DIR
from raytf.rundir.storage import Storage

UPLOAD_EVERY_S = 30.0


class TensorBoardWriter:
    def __init__(self, storage: Storage):
        self.storage = storage
        self._writer = None
        self._dir = storage.path(TENSORBOARD_DIR) if storage.local else None
        self._uploaded = time.monotonic()

    def _open(self):
        from tensorboardX import SummaryWriter

        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="raytf-tb-")
        os.makedirs(self._dir, exist_ok=True)
        return SummaryWriter(self._dir, flush_secs=5)

    def add(self, report: Report) -> None:
        scalars = {
            k: float(v)
            for k, v in report.metrics.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        step = report.metrics.get("step")
        if not scalars or not isinstance(step, int):
            return
        if self._writer is None:
            self._writer = self._open()
        for name, value in scalars.items():
            self._writer.add_scalar(name, value, global_step=step, walltime=report.time)
        if not self.storage.local and time.monotonic() - self._uploaded >= UPLOAD_EVERY_S:
            self._upload()

    def _upload(self) -> None:
        self._writer.flush()
        self.storage.upload_tree(self._dir, TENSORBOARD_DIR)
        self._uploaded = time.monotonic()

    def reset(self) -> None:
        """After a failed write: drop the writer (its file may hold a torn record); the
        next report opens a new event file beside it, which TensorBoard reads as well."""
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the same failure again: nothing to keep
                pass

    def close(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        if not self.storage.local:
            self._upload()
            shutil.rmtree(self._dir, ignore_errors=True)
