"""Starting a run afresh under a name that already has files (``RunConfig.start_fresh``).

The earlier run's files are moved into ``RUN_DIR/previous/<UTC time>/``, never
deleted: a model changed between launches of one name is refused
(``CheckpointMismatchError``) until the user says to start over, and even then
the committed work stays where it can be found and restored by hand.
"""

from __future__ import annotations

import time

from raytf.rundir.lease import GENERATIONS, LEASE
from raytf.rundir.storage import Storage

PREVIOUS_DIR = "previous"


def set_aside(storage: Storage) -> str | None:
    """Move everything in the run directory but earlier set-asides and the lease (and
    its generations) into ``previous/<stamp>/``; where it went, or None when there was
    nothing."""
    names = [n for n in storage.listdir() if n not in (PREVIOUS_DIR, LEASE, GENERATIONS)]
    names = [n for n in names if not n.startswith(".raytf-probe-")]
    if not names:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for name in names:
        storage.move((name,), (PREVIOUS_DIR, stamp, name))
    return storage.url(PREVIOUS_DIR, stamp)
