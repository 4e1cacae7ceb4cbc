"""Where a run's files live: a local or shared directory, or any fsspec URL (s3://, gs://...).

One small interface over fsspec so the driver and the workers never care
which. Commits rely on one property: a file written by ``write_atomic`` is
seen whole or not at all (rename on a POSIX filesystem, a single PUT on an
object store).
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import uuid
from typing import Any

import fsspec


def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


class Storage:
    def __init__(self, root: str):
        if is_local(root):
            root = os.path.abspath(os.path.expanduser(root.removeprefix("file://")))
        self.uri = root
        self.fs, self.root = fsspec.core.url_to_fs(root)
        self.local = is_local(root)

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
        self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
        if not self.local:
            self.fs.pipe_file(target, data)  # one PUT: whole or absent
            return
        tmp = posixpath.join(posixpath.dirname(target), f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)

    def write_json_atomic(self, doc: Any, *parts: str) -> None:
        self.write_atomic(json.dumps(doc, indent=2, sort_keys=True, default=str).encode(), *parts)

    def remove(self, *parts: str) -> None:
        if not self.exists(*parts):
            return
        if self.local:
            # fsspec's local rm calls os.getcwd(), which raises once the driver's working
            # directory is gone (a `ray job submit` working_dir that Ray cleaned up).
            shutil.rmtree(self.path(*parts), ignore_errors=True)
            return
        self.fs.rm(self.path(*parts), recursive=True)

    def upload_dir(self, local_dir: str, *parts: str) -> None:
        """Copy a local directory's files under ``parts`` (for remote storage)."""
        for name in sorted(os.listdir(local_dir)):
            self.fs.put_file(os.path.join(local_dir, name), self.path(*parts, name))

    def download_dir(self, local_dir: str, *parts: str) -> None:
        os.makedirs(local_dir, exist_ok=True)
        for name in self.listdir(*parts):
            self.fs.get_file(self.path(*parts, name), os.path.join(local_dir, name))
