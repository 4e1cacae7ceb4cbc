"""TensorBoard event files on the driver, for any training loop, without TensorFlow.

Keras's TensorBoard callback writes from inside a Keras loop on the chief;
this writes what every loop reports (rank 0's numeric metrics, by step and
wall time) to ``RUN_DIR/tensorboard``, with tensorboardX's protobufs and
record framing (pure Python: importing it costs the driver ~0.2 s, TensorFlow
5 s). On an object store the files are written locally and uploaded when
flushed.

Written here, on the caller's thread, not through tensorboardX's
``SummaryWriter``: its writer thread dies on the first write error (a full
disk) and leaves a bounded queue nobody drains, so every later event, and its
``atexit`` close, blocks for good: a driver that had finished its run never
exited. Here a failed write raises to the recorder, which pauses this record
and comes back with a new event file (``reset``).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time

from raytf.messages import Report
from raytf.rundir.run_log import TENSORBOARD_DIR
from raytf.rundir.storage import Storage

UPLOAD_EVERY_S = 30.0
FLUSH_EVERY_S = 5.0


class _EventFile:
    """One ``events.out.tfevents.*`` file, as TensorBoard reads it."""

    def __init__(self, directory: str):
        from tensorboardX.record_writer import RecordWriter

        name = f"events.out.tfevents.{time.time():.6f}.{socket.gethostname()}"
        self._records = RecordWriter(os.path.join(directory, name))
        self._flushed = time.monotonic()
        self._write(wall_time=time.time(), file_version="brain.Event:2")

    def _write(self, **fields) -> None:
        from tensorboardX.proto import event_pb2

        self._records.write(event_pb2.Event(**fields).SerializeToString())

    def scalars(self, values: dict[str, float], step: int, wall_time: float) -> None:
        from tensorboardX.proto import summary_pb2

        tags = [summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in values.items()]
        self._write(wall_time=wall_time, step=step, summary=summary_pb2.Summary(value=tags))
        if time.monotonic() - self._flushed >= FLUSH_EVERY_S:
            self.flush()

    def flush(self) -> None:
        self._records.flush()
        self._flushed = time.monotonic()

    def close(self) -> None:
        self._records.flush()
        self._records.close()


class TensorBoardWriter:
    def __init__(self, storage: Storage):
        self.storage = storage
        self._file: _EventFile | None = None
        self._dir = storage.path(TENSORBOARD_DIR) if storage.local else None
        self._uploaded = time.monotonic()

    def _open(self) -> _EventFile:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="raytf-tb-")
        os.makedirs(self._dir, exist_ok=True)
        return _EventFile(self._dir)

    def add(self, report: Report) -> None:
        scalars = {
            k: float(v)
            for k, v in report.metrics.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        step = report.metrics.get("step")
        if not scalars or not isinstance(step, int):
            return
        if self._file is None:
            self._file = self._open()
        self._file.scalars(scalars, step, report.time)
        if not self.storage.local and time.monotonic() - self._uploaded >= UPLOAD_EVERY_S:
            self._upload()

    def _upload(self) -> None:
        self._file.flush()
        self.storage.upload_tree(self._dir, TENSORBOARD_DIR)
        self._uploaded = time.monotonic()

    def reset(self) -> None:
        """After a failed write: drop the file (it may end in a torn record); the next
        report opens a new event file beside it, which TensorBoard reads as well."""
        events, self._file = self._file, None
        if events is not None:
            try:
                events.close()
            except OSError:  # the same failure again: nothing more to keep
                pass

    def close(self) -> None:
        if self._file is None:
            return
        self._file.close()
        if not self.storage.local:
            self.storage.upload_tree(self._dir, TENSORBOARD_DIR)
            shutil.rmtree(self._dir, ignore_errors=True)
