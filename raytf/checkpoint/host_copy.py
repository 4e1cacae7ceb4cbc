"""The latest checkpoints' TF files, kept in host memory on each worker node.

A restart after a worker failure starts new processes (every MWMS process must
be restarted), so nothing in a worker's own memory survives it; files in a
tmpfs (``/dev/shm``: host memory) do, for as long as the node lives. With
object storage, restoring 300 MB from the bucket took 4.6-5.5 s against the
loopback S3 server here; from the node's copy it is a local read. So every save
is also kept here: the chief keeps the files it wrote before uploading them,
and the first rank on each other node writes its own (identical: the variables
are mirrored) from its snapshot. A restore takes the TF files from this node's
copy when the committed manifest names this copy (``copy_id``: a copy of the
same step from an attempt that was never committed is not the committed
state), and the small per-rank state files from storage; else it downloads.

Local storage needs none of it (the run directory is already a local read), so
a copy is kept only with object storage. Cost: up to ``KEEP`` checkpoints of
host memory per node per run, one more while the newest committed step is older
than both (its commit-waiting successors), freed when the run finishes. A run that never
finishes (its driver killed, or out of failures) keeps its copies for a
relaunch to resume from; the first rank of each node that starts a run removes
other runs' copies not written for ``RAYTF_HOST_COPY_MAX_AGE_S`` (a day by
default), so they do not fill host memory until the node restarts
(``RAYTF_HOST_COPY_DIR=""`` turns copies off).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import stat
import tempfile
import time
import uuid

from raytf.checkpoint.layout import TF_PREFIX, is_committed, parse_step_dirname
from raytf.rundir.storage import Storage
from raytf.settings import Settings

logger = logging.getLogger("raytf")

KEEP = 2  # the newest checkpoint and the one being written
_ID_FILE = "copy_id"


def is_tf_file(name: str) -> bool:
    return name.startswith(TF_PREFIX + ".")


def node_copy(run_url: str, settings: Settings, sweep: bool) -> HostCopy:
    """This node's copies for a run starting here, which ask the run's storage whether
    a step is committed; ``sweep``: the node's first rank also removes other runs'
    stale copies (``HostCopy.sweep``)."""
    asked = functools.partial(is_committed, Storage(run_url))
    copy = HostCopy(run_url, settings.host_copy_dir or None, committed=asked)
    if sweep:
        copy.sweep(settings.host_copy_max_age_s)
    return copy


def _asks(committed, step) -> bool:
    """``committed(step)``, True where storage cannot answer (a copy kept is only memory;
    one dropped may be the restart's), False with nothing to ask."""
    if committed is None or step is None:
        return False
    try:
        return bool(committed(step))
    except Exception:  # noqa: BLE001 - any storage error: keep it
        return True


def private_dir(path: str) -> None:
    """``path`` a directory of this user's, mode 0700; an error if another user holds it
    (or it is a link): copies then fail like a full tmpfs, on disk instead. (Rank
    working directories on a node's temp directory are checked with it too.)"""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if st.st_uid != os.getuid() or not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"{path} is not a directory of this user's")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


def _being_written(path: str) -> bool:
    """A copy being written now (its staging directory exists): a live run, however
    long since its last checkpoint."""
    try:
        return any(name.startswith(".staging-") for name in os.listdir(path))
    except OSError:
        return True


class HostCopy:
    """This node's copies for one run; ``root`` None: no copies (a no-op)."""

    def __init__(self, run_url: str, root: str | None, committed=None):
        key = hashlib.sha256(run_url.encode()).hexdigest()[:16]
        # Per user, readable by its owner only: a node is shared, and a checkpoint is
        # the model (a shared directory also let the first user's mode lock others out).
        mine = f"raytf-checkpoints-{os.getuid()}"
        self.dir = os.path.join(root, mine, key) if root else None
        self._mine: set[str] = set()  # copy ids this process kept (what ``drop`` removes)
        self.committed = committed  # step -> committed in the run's storage? (None: unasked)

    @property
    def enabled(self) -> bool:
        return self.dir is not None

    def staging(self) -> str:
        """A private directory to write a checkpoint's files into, then ``keep`` it."""
        private_dir(os.path.dirname(self.dir))
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        return tempfile.mkdtemp(prefix=".staging-", dir=self.dir)

    def fill(self, fill, tf: bool, must_write_tf: bool) -> tuple[str, bool]:
        """Have ``fill(directory, tf)`` write a checkpoint's files into a staging
        directory: in host memory when a copy is to be kept and there is room, else
        on disk. Returns (the directory, whether it is a host copy to ``keep``).

        A full tmpfs (Docker's default /dev/shm is 64 MB) costs the copy, never the
        checkpoint: the files are written again on disk (the TF files only where
        ``must_write_tf``: a node leader's exist only for its copy).
        """
        if self.enabled and tf:
            staging = None
            try:
                staging = self.staging()  # may race another rank's drop of an empty dir
                fill(staging, True)
                return staging, True
            except OSError as exc:
                if staging is not None:
                    shutil.rmtree(staging, ignore_errors=True)
                logger.warning("no host copy of this checkpoint (%s): writing it on disk", exc)
            except BaseException:
                if staging is not None:
                    shutil.rmtree(staging, ignore_errors=True)
                raise
        staging = tempfile.mkdtemp(prefix="raytf-")
        try:
            fill(staging, tf and must_write_tf)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return staging, False

    def keep(self, staging: str, dirname: str) -> str:
        """Make ``staging`` this node's copy of ``dirname``; returns its copy id.

        Replaces an older copy of the same step (an attempt that never committed it),
        and drops all but the newest ``KEEP`` steps. Where ``committed`` asks the run's
        storage (``node_copy``), the copy of a committed step is what a restart reads:
        a late write of that step never replaces it, and the newest committed copy
        stays however many newer saves wait for their commit (a stalled store: saves
        came faster than commits, the copies of two uncommitted steps pushed the
        committed one out, and both ranks restored from the bucket).
        """
        final = os.path.join(self.dir, dirname)
        step = parse_step_dirname(dirname)
        if os.path.isdir(final) and _asks(self.committed, step):
            shutil.rmtree(staging, ignore_errors=True)  # the committed copy stays
            return self._id_of(final) or ""
        copy_id = uuid.uuid4().hex
        with open(os.path.join(staging, _ID_FILE), "w") as f:
            f.write(copy_id)
        if os.path.isdir(final):
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(staging, final)
        except OSError:  # another rank of this node got there first: theirs is as good
            shutil.rmtree(staging, ignore_errors=True)
            return self._id_of(final) or copy_id
        self._mine.add(copy_id)
        self._prune()
        return copy_id

    def find(self, dirname: str, manifest: dict) -> str | None:
        """This node's copy of a committed checkpoint, or None: the copy the manifest
        names, with every TF file at its committed size."""
        if self.dir is None:
            return None
        path = os.path.join(self.dir, dirname)
        if self._id_of(path) not in set(manifest.get("host_copies", ())):
            return None
        for name, size in manifest["files"].items():
            if is_tf_file(name):
                try:
                    if os.path.getsize(os.path.join(path, name)) != size:
                        return None
                except OSError:
                    return None
        return path

    def drop(self) -> None:
        """The run finished: the copies this process kept are of no further use, nor
        are older steps' copies, which processes of earlier attempts kept (a survivor's
        emergency checkpoint, say: seen left behind, 289 MB, after a run with restarts).
        The newest step stays where another process kept it: another rank sharing this
        directory (nodes simulated on one host) may still be storing it."""
        if self.dir is None or not os.path.isdir(self.dir):
            return
        names = os.listdir(self.dir)
        steps = {n: parse_step_dirname(n) for n in names}
        newest = max((s for s in steps.values() if s is not None), default=None)
        for name in names:
            path = os.path.join(self.dir, name)
            older = steps[name] is not None and steps[name] < newest
            if older or self._id_of(path) in self._mine:
                shutil.rmtree(path, ignore_errors=True)
        try:
            os.rmdir(self.dir)
        except OSError:
            pass  # not empty: another rank's copies, or one being written

    def sweep(self, max_age_s: float, now: float | None = None) -> list[str]:
        """Remove other runs' copies on this node not written for ``max_age_s``: runs
        that never finished. A run's directory is touched by every copy kept in it, so
        a live run's is never older than its checkpoint interval. Returns the removed."""
        if self.dir is None:
            return []
        root = os.path.dirname(self.dir)
        now = time.time() if now is None else now
        removed = []
        try:
            entries = list(os.scandir(root))
        except OSError:
            return []
        for entry in entries:
            if entry.path == self.dir or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                age = now - entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            if age > max_age_s and not _being_written(entry.path):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
        return removed

    def _id_of(self, path: str) -> str | None:
        try:
            with open(os.path.join(path, _ID_FILE)) as f:
                return f.read().strip()
        except OSError:
            return None

    def _prune(self) -> None:
        steps = []
        for name in os.listdir(self.dir):
            step = parse_step_dirname(name)
            if step is not None:
                steps.append((step, name))
        older = sorted(steps)[:-KEEP]
        # The newest committed one among them stays (asked newest first; a question
        # storage cannot answer keeps it too).
        spare = next((n for step, n in reversed(older) if _asks(self.committed, step)), None)
        for _, name in older:
            if name != spare:
                shutil.rmtree(os.path.join(self.dir, name), ignore_errors=True)
