"""Run-directory paths and URLs, without a filesystem: what a config needs to name one.

Apart from ``storage`` (which opens stores through fsspec) so that the configs,
and what reads them without running anything (the docs site's generated
reference, ``raytf validate``), import no storage library.
"""

from __future__ import annotations

import os
import posixpath

STATE_FILE = "state.json"  # the run's state (raytf.rundir.run_state): what marks a run


def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def absolute(local: str) -> str:
    """A local path or ``file://`` URL as an absolute path (only ever given local ones)."""
    return os.path.abspath(os.path.expanduser(local.removeprefix("file://")))


def join_run_dir(storage_path: str, name: str) -> str:
    """``storage_path/name``: a URL keeps its scheme, a local path becomes absolute."""
    if is_local(storage_path):
        return os.path.join(absolute(storage_path), name)
    return posixpath.join(storage_path.rstrip("/"), name)
