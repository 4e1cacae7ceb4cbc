"""Where a run's files live: a local or shared directory, or any fsspec URL (s3://, gs://...).

One small interface over fsspec so the driver and the workers never care
which. Commits rely on one property: a file written by ``write_atomic`` is
seen whole or not at all (rename on a POSIX filesystem, a single PUT on an
object store).

A URL stays a URL from ``RunConfig.storage_path`` to every process: the
driver and each worker open it themselves (the endpoint and credentials come
from the environment, ``FSSPEC_S3_ENDPOINT_URL``, ``AWS_*``, which the
workers are given). ``check_storage`` proves a storage path usable before
anything starts: an unknown scheme, a missing filesystem library, an
unreachable endpoint or bucket and a path that cannot be written are each a
``ConfigError`` naming the value and the fix, instead of a run that writes
its checkpoints somewhere nobody will look for them.

Uploads of a checkpoint's files run in parallel (object stores serve one
PUT per connection; s3fs splits a large file into a multipart upload) and
each file is retried with backoff, so a storage endpoint that goes away for
a while costs time, never a checkpoint: nothing is committed until every
part is stored whole.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fsspec

from raytf.compat import DISTRIBUTION
from raytf.errors import ConfigError
from raytf.rundir.paths import absolute as _absolute
from raytf.rundir.paths import is_local, join_run_dir  # noqa: F401  (their old home)

logger = logging.getLogger("raytf")

UPLOAD_THREADS = 4
UPLOAD_RETRIES = 6  # 1 + 2 + 4 + 8 + 16 s of backoff: an endpoint may be away ~30 s
# scheme -> (the fsspec library it needs, the extra of raytf that brings it)
EXTRAS = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
}
_S3_PROBE = {"config_kwargs": {"connect_timeout": 5, "retries": {"max_attempts": 1}}}
PROBE_OPTIONS = {"s3": _S3_PROBE, "s3a": _S3_PROBE}  # the storage check's client: fail fast


_FROM_ENV: dict[str, set[str]] = {}  # protocol -> kwargs this module took from the environment


def refresh_fsspec_env() -> None:
    """Read the ``FSSPEC_<PROTOCOL>_<KWARG>`` variables (the endpoint) again.

    fsspec reads them once, when it is imported; a worker is handed the driver's
    after that (and a test sets them late), so each process that opens storage with
    a changed environment reads them once more. What an earlier reading took from a
    variable that is gone now is forgotten.
    """
    conf = fsspec.config.conf
    for protocol, keys in _FROM_ENV.items():
        for key in keys:
            conf.get(protocol, {}).pop(key, None)
    fresh: dict[str, dict] = {}
    fsspec.config.set_conf_env(fresh)
    for protocol, kwargs in fresh.items():
        conf.setdefault(protocol, {}).update(kwargs)
    _FROM_ENV.clear()
    _FROM_ENV.update({p: set(kw) for p, kw in fresh.items()})


class Storage:
    def __init__(self, root: str, **fs_options: Any):
        if is_local(root):
            root = _absolute(root)
        self.uri = root
        self.local = is_local(root)
        # Other processes write here too (workers their parts, the driver the manifest):
        # a cached listing would hide their files, so every question asks the store.
        options = {} if self.local else {"use_listings_cache": False, **fs_options}
        self.fs, self.root = fsspec.core.url_to_fs(root, **options)

    def path(self, *parts: str) -> str:
        """A path inside the storage root, in the filesystem's own notation."""
        return posixpath.join(self.root, *parts) if parts else self.root

    def url(self, *parts: str) -> str:
        """The same path as a URL other processes can open (plain path when local)."""
        return self.path(*parts) if self.local else self.fs.unstrip_protocol(self.path(*parts))

    def makedirs(self, *parts: str) -> None:
        self.fs.makedirs(self.path(*parts), exist_ok=True)

    def exists(self, *parts: str) -> bool:
        return self.fs.exists(self.path(*parts))

    def listdir(self, *parts: str) -> list[str]:
        if not self.exists(*parts):
            return []
        return sorted(
            posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self.path(*parts), detail=False)
        )

    def size(self, *parts: str) -> int:
        return int(self.fs.size(self.path(*parts)))

    def read_json(self, *parts: str) -> Any:
        with self.fs.open(self.path(*parts), "r") as f:
            return json.load(f)

    def write_atomic(self, data: bytes, *parts: str) -> None:
        target = self.path(*parts)
        if not self.local:
            # No makedirs: an object store has no directories, and s3fs's would create
            # a missing (mistyped) bucket instead of failing.
            self.fs.pipe_file(target, data)  # one PUT: whole or absent
            return
        os.replace(self._whole_beside(target, data), target)

    def _whole_beside(self, target: str, data: bytes) -> str:
        """``data`` in a temporary file beside ``target``, on disk: what an atomic
        rename or link puts in place."""
        self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
        tmp = posixpath.join(posixpath.dirname(target), f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def create_exclusive(self, data: bytes, *parts: str) -> bool:
        """Write ``data`` only where nothing is yet: True when this call created it, False
        when something was there. What makes "never written twice" the store's rule and
        not only raytf's: on a file system a whole temporary file hard-linked into place
        (or ``O_EXCL`` where links are not supported), on S3 a conditional PUT
        (``If-None-Match: *``, s3fs's ``mode="create"``). A store with no conditional write
        gets fsspec's default (look, then write): a race stays possible there."""
        target = self.path(*parts)
        if not self.local:
            try:
                self.fs.pipe_file(target, data, mode="create")
            except FileExistsError:
                return False
            return True
        tmp = self._whole_beside(target, data)
        try:
            os.link(tmp, target)  # whole or absent, and only if absent
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links (some FUSE mounts)
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        finally:
            os.remove(tmp)
        return True

    def write_json_atomic(self, doc: Any, *parts: str) -> None:
        self.write_atomic(_json_bytes(doc), *parts)

    def create_json_exclusive(self, doc: Any, *parts: str) -> bool:
        return self.create_exclusive(_json_bytes(doc), *parts)

    def remove(self, *parts: str) -> None:
        if not self.exists(*parts):
            return
        if self.local:
            # fsspec's local rm calls os.getcwd(), which raises once the driver's working
            # directory is gone (a `ray job submit` working_dir that Ray cleaned up).
            path = self.path(*parts)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
            return
        self.fs.rm(self.path(*parts), recursive=True)

    def move(self, src: tuple[str, ...], dst: tuple[str, ...]) -> None:
        """Move a file or directory within the storage (an object store copies, then
        deletes: slow for big checkpoints, and never partial at the destination's name
        until the copy is done)."""
        if self.local:
            target = self.path(*dst)
            os.makedirs(posixpath.dirname(target), exist_ok=True)
            os.replace(self.path(*src), target)
            return
        self.fs.mv(self.path(*src), self.path(*dst), recursive=True)

    def upload_dir(self, local_dir: str, *parts: str, names: list[str] | None = None) -> None:
        """Copy a local directory's files (or only ``names``) under ``parts``: in parallel,
        each retried (every failed try is a warning in the worker's output)."""
        names = sorted(os.listdir(local_dir)) if names is None else names

        def put(name: str) -> None:
            src, dst = os.path.join(local_dir, name), self.path(*parts, name)
            retrying(lambda: self.fs.put_file(src, dst), f"upload of {name}")

        with ThreadPoolExecutor(max_workers=min(UPLOAD_THREADS, len(names) or 1)) as pool:
            list(pool.map(put, names))  # re-raises the first file that never went up

    def upload_tree(self, local_dir: str, *parts: str) -> None:
        """Copy a local directory with its subdirectories under ``parts``."""
        for dirpath, _, files in os.walk(local_dir):
            rel = os.path.relpath(dirpath, local_dir)
            sub = () if rel == "." else tuple(rel.split(os.sep))
            if self.local:
                self.makedirs(*parts, *sub)  # an object store has no directories to make
            if files:
                self.upload_dir(dirpath, *parts, *sub, names=files)

    def download_dir(self, local_dir: str, *parts: str, names: list[str] | None = None) -> None:
        """Copy the directory's files (or only ``names``) into ``local_dir``."""
        names = self.listdir(*parts) if names is None else names
        self.download_files(local_dir, {name: (*parts, name) for name in names})

    def download_files(self, local_dir: str, sources: dict[str, tuple[str, ...]]) -> None:
        """Copy each file (a local name: its path in the storage) into ``local_dir``,
        in parallel."""
        os.makedirs(local_dir, exist_ok=True)

        def get(item: tuple[str, tuple[str, ...]]) -> None:
            name, src = item
            self.fs.get_file(self.path(*src), os.path.join(local_dir, name))

        with ThreadPoolExecutor(max_workers=min(UPLOAD_THREADS, len(sources) or 1)) as pool:
            list(pool.map(get, sources.items()))

    def files_under(self, *parts: str) -> list[str]:
        """Every file under the directory, subdirectories included, as a path relative to
        it ("a/b"): one listing of the store (paginated), not one per folder."""
        root = self.path(*parts).rstrip("/")
        found = [f for f in self.fs.find(root) if f.rstrip("/") != root]
        base = self.fs._strip_protocol(root)
        return [posixpath.relpath(self.fs._strip_protocol(f), base) for f in found]

    def download_tree(self, local_dir: str, *parts: str) -> None:
        """Copy the directory with its subdirectories into ``local_dir`` (a SavedModel's
        ``variables/``): every file under it, at its relative path."""
        os.makedirs(local_dir, exist_ok=True)

        def get(rel: str) -> None:
            target = os.path.join(local_dir, *rel.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            self.fs.get_file(self.path(*parts, *rel.split("/")), target)

        files = self.files_under(*parts)
        with ThreadPoolExecutor(max_workers=min(UPLOAD_THREADS, len(files) or 1)) as pool:
            list(pool.map(get, files))


def _json_bytes(doc: Any) -> bytes:
    return json.dumps(doc, indent=2, sort_keys=True, default=str).encode()


def cause(exc: BaseException) -> str:
    """A storage error in a line, and where a worker found no credentials, where it
    looks for them (the driver's are not forwarded unless the run asks)."""
    text = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    if "credential" in text.lower():
        text += (
            " (the workers use their node's own credentials: instance profile, service "
            "account, ~/.aws. On a cloud cluster each worker pool needs its own: Ray's "
            "launcher gives its to the head only; raytf validate names a pool without "
            "one. RunConfig(forward_credentials=True) gives the workers the driver's "
            "variables, which helps only where the driver's credentials are variables)"
        )
    return text


def retrying(call, what: str, retries: int = UPLOAD_RETRIES, first_wait: float = 1.0):
    """``call()``, tried again with backoff on any storage error (each failed try a
    warning) and re-raised after the last; a missing file is an answer, never retried."""
    wait = first_wait
    for attempt in range(1, retries + 1):
        try:
            return call()
        except FileNotFoundError:
            raise
        except Exception as exc:  # noqa: BLE001 - any storage error: try again, then give up
            if attempt == retries:
                raise
            logger.warning("%s failed (%s), retry %d in %.0f s", what, exc, attempt, wait)
            time.sleep(wait)
            wait = min(wait * 2, 16.0)
    return None


def check_storage(storage_path: str, run_dir: str) -> Storage:
    """A Storage for ``run_dir`` proved writable and readable, or a ConfigError saying why."""
    where = f"RunConfig.storage_path = {storage_path!r}"
    refresh_fsspec_env()
    if not is_local(storage_path):
        scheme = storage_path.split("://", 1)[0]
        try:
            fsspec.get_filesystem_class(scheme)
        except ValueError:
            raise ConfigError(
                f"{where}: no filesystem is known for {scheme}:// (a typo?); use a local or "
                "shared path, s3://, gs:// or another fsspec protocol"
            ) from None
        except ImportError as exc:
            lib, extra = EXTRAS.get(scheme, (None, None))
            fix = f"pip install {lib} ({DISTRIBUTION}'s {extra} extra)"
            if lib is None:
                fix = "install its fsspec library"
            raise ConfigError(
                f"{where}: {scheme}:// needs a library that is missing ({exc}); "
                f"{fix} on the driver and every node"
            ) from None
    scheme = "file" if is_local(storage_path) else storage_path.split("://", 1)[0]
    try:
        # Answer in seconds: a store's client retries an unreachable endpoint for ~30 s.
        storage = Storage(run_dir, **PROBE_OPTIONS.get(scheme, {}))
        if not storage.local:
            bucket = storage.root.split("/", 1)[0]
            try:
                storage.fs.info(bucket)  # raises the store's own reason (endpoint, auth)
            except FileNotFoundError:
                raise FileNotFoundError(f"bucket {bucket!r} does not exist") from None
        probe = f".raytf-probe-{uuid.uuid4().hex}"
        storage.write_atomic(b"raytf", probe)
        if not storage.exists(probe) or storage.size(probe) != 5:
            raise OSError("a probe file written there cannot be read back")
        storage.remove(probe)
    except Exception as exc:  # noqa: BLE001 - every reason means the same: unusable
        hint = (
            "check the endpoint (FSSPEC_S3_ENDPOINT_URL for S3-compatible stores), the "
            "bucket's existence and the credentials"
            if not is_local(storage_path)
            else "give a directory this user can write (on every node: a shared mount)"
        )
        raise ConfigError(
            f"{where}: cannot write the run directory {run_dir} "
            f"({type(exc).__name__}: {exc}); {hint}"
        ) from None
    return storage
