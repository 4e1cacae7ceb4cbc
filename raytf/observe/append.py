"""A file in the run directory that only grows: appended in place, or uploaded whole.

A local (or shared) run directory takes appends directly. An object store has
no append, so the lines go to a local spool file first and the whole file is
uploaded when a flush is due (every ``UPLOAD_EVERY_S``) and at the end: what
``raytf status`` reads from a bucket is at most that old.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shutil
import tempfile
import time

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
            self._download()
        self._file = open(self._path, "a", encoding="utf-8")
        if _ends_mid_line(self._path):
            self._file.write("\n")  # a driver killed mid-write: its last line stays its own

    def _download(self) -> None:
        """A driver continuing a run continues its file; one that cannot read it writes
        beside it rather than over the earlier drivers' record."""
        try:
            if self.storage.exists(*self.parts):
                self.storage.fs.get_file(self.storage.path(*self.parts), self._path)
        except Exception as exc:  # noqa: BLE001 - a new file is better than none
            *head, name = self.parts
            self.parts = (*head, f"{name}.{int(time.time())}")
            logger.warning("could not read %s (%s): writing %s", name, exc, self.parts[-1])

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
                self.storage.fs.put_file(self._path, self.storage.path(*self.parts))
                self._dirty = False
            except Exception as exc:  # noqa: BLE001 - the next flush tries again
                logger.warning("could not upload %s: %s", "/".join(self.parts), exc)
            self._uploaded = time.monotonic()

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
