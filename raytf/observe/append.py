"""A file in the run directory that only grows: appended in place, or uploaded in segments.

A local (or shared) run directory takes appends directly. An object store has
no append, so the lines go to a local spool file first and what the file
gained since the last upload goes up as one segment when a flush is due (every
``UPLOAD_EVERY_S``) and at the end (``raytf.rundir.segments``: the format, and
how ``status``, ``logs`` and ``plot`` read it back whole). An upload costs what
it adds, however long the run; every ``MERGE_EVERY`` segments they are uploaded
once more as one (the spool holds only those) and deleted in one call, so the
file stays a few hundred objects for a week. What ``raytf status`` reads from a
bucket is at most one upload interval old.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shutil
import tempfile
import time

from raytf.rundir import segments
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")

UPLOAD_EVERY_S = 10.0


class AppendFile:
    def __init__(self, storage: Storage, *parts: str):
        self.storage, self.parts = storage, parts
        self._uploaded = 0.0
        self._dirty = False
        self._full = False  # the last local flush failed (said once)
        if storage.local:
            storage.makedirs(*parts[:-1])
            self._path = storage.path(*parts)
        else:
            self._spool = tempfile.mkdtemp(prefix="raytf-spool-")
            self._path = os.path.join(self._spool, posixpath.basename(parts[-1]))
            self._next = self._first_sequence()
            self._sent = 0  # the spool's bytes already uploaded (as the window's segments)
            self._window: list[int] = []  # segments uploaded since the last merge
        self._file = open(self._path, "a", encoding="utf-8")
        if _ends_mid_line(self._path):
            self._file.write("\n")  # a driver killed mid-write: its last line stays its own

    def _first_sequence(self) -> int:
        """After the segments earlier drivers of the run uploaded (one listing). If the
        store cannot say, a number from the clock: after them all, as a later driver is."""
        try:
            return segments.last_sequence(self.storage, *self.parts) + 1
        except Exception as exc:  # noqa: BLE001 - the run goes on; its record too
            logger.warning("could not list %s's segments (%s)", self.parts[-1], exc)
            return int(time.time() * 100)  # 12 digits, as segment names have, until 2286

    def write(self, text: str) -> None:
        try:
            self._file.write(text)
        except OSError as exc:  # the buffer could not be flushed (a full disk): lines lost
            if not self._full:
                logger.warning("could not write %s (%s); trying again", "/".join(self.parts), exc)
            self._full = True
            return
        self._dirty = True

    def flush(self, force: bool = False) -> None:
        try:
            self._file.flush()  # a full disk: the lines wait in the buffer for the next flush
        except OSError as exc:
            if not self._full:
                logger.warning("could not write %s (%s); trying again", "/".join(self.parts), exc)
            self._full = True
            return
        self._full = False
        if self.storage.local or not self._dirty:
            return
        if force or time.monotonic() - self._uploaded >= UPLOAD_EVERY_S:
            try:
                self._upload_new()
                if len(self._window) >= segments.MERGE_EVERY:
                    self._merge()
                self._dirty = False
            except Exception as exc:  # noqa: BLE001 - the next flush tries again
                logger.warning("could not upload %s: %s", "/".join(self.parts), exc)
            self._uploaded = time.monotonic()

    def _segment(self, first: int, last: int) -> tuple[str, ...]:
        *head, name = self.parts
        return (*head, segments.parts_dir(name), segments.part_name(first, last))

    def _upload_new(self) -> None:
        """What the spool gained since the last upload, as the next segment."""
        with open(self._path, "rb") as f:
            f.seek(self._sent)
            data = f.read()
        if not data:
            return
        self.storage.write_atomic(data, *self._segment(self._next, self._next))
        self._window.append(self._next)
        self._next += 1
        self._sent += len(data)

    def _merge(self) -> None:
        """The window's segments as one, then theirs deleted; the spool starts empty."""
        with open(self._path, "rb") as f:
            spool = f.read()
        first, last = self._window[0], self._window[-1]
        self.storage.write_atomic(spool[: self._sent], *self._segment(first, last))
        singles = [self.storage.path(*self._segment(seq, seq)) for seq in self._window]
        self._file.close()
        with open(self._path, "wb") as f:
            f.write(spool[self._sent :])  # nothing after a flush; kept all the same
        self._file = open(self._path, "a", encoding="utf-8")
        self._window, self._sent = [], 0
        try:
            self.storage.fs.rm(singles)
        except Exception as exc:  # noqa: BLE001 - readers take the merged one anyway
            logger.warning("could not delete %s's merged segments: %s", self.parts[-1], exc)

    def close(self) -> None:
        self.flush(force=True)
        self._file.close()
        if self.storage.local:
            return
        if self._dirty:  # the last upload failed: the spool is the only copy
            logger.warning("%s was not uploaded; it is kept at %s", self.parts[-1], self._path)
        else:
            shutil.rmtree(self._spool, ignore_errors=True)


def _ends_mid_line(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:  # empty or absent
        return False
