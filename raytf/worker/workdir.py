"""Each rank's working directory: the chief keeps the job's, every other rank has its own.

Why: the ranks of a node all start in the job's directory, so a loop that writes
relative paths from every worker -- as TensorFlow's guides do: ``./ckpt`` made
after an ``os.path.exists`` check, then ``model.save("./ckpt/ckpt-1.keras")`` --
races with itself on one host (seen: ``FileExistsError: './ckpt'``, and a
half-written ``.keras`` zip read back). MWMS's own answer is that the chief
writes the real path and the other workers write somewhere of their own (the
guide's ``write_filepath``); raytf gives that to the loop that does not do it.

Rank 0 stays in the job's directory: what it writes is where its user looks.
Rank r > 0 runs in ``RUN_DIR/workdirs/rank_<r>`` (under the node's temp directory
when RUN_DIR is object storage), which holds a link to each entry of the job's
directory: relative reads find the job's files and modules, and what the rank
creates is its own. An entry that existed before the rank started is shared
through its link, so writes into such a directory from every rank still meet
there: name those files by rank (``raytf.get_context().rank``). The directories
stay after the run (they hold the workers' outputs), and a restarted rank
finds its own again, its links made anew at every attempt: a relaunch from
another job directory (``ray job submit`` unpacks each submission's
``--working-dir`` into a new one) reads the new files on every rank, not the
old ones on ranks > 0.

Under the node's temp directory the rank directories sit in
``raytf-workdirs-<uid>``, mode 0700 and checked to be this user's own
directory (not a link), as host copies are: a node is shared, and the path is
predictable.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import uuid
from collections.abc import Iterator

from raytf.checkpoint.host_copy import private_dir
from raytf.rundir.storage import is_local

WORKDIRS = "workdirs"


def rank_dir(run_dir: str, rank: int) -> str:
    """Where rank ``rank`` > 0 runs its loop for the run at ``run_dir``."""
    if is_local(run_dir):
        root = os.path.join(run_dir, WORKDIRS)
    else:
        key = hashlib.sha256(run_dir.encode()).hexdigest()[:16]
        root = os.path.join(node_root(), key)
    return os.path.join(root, f"rank_{rank}")


def node_root() -> str:
    """This user's rank directories under the node's temp directory (object storage)."""
    return os.path.join(tempfile.gettempdir(), f"raytf-workdirs-{os.getuid()}")


@contextlib.contextmanager
def own_workdir(run_dir: str, rank: int) -> Iterator[str]:
    """Run the block in this rank's working directory; the process's own after it (a
    kept process serves other runs)."""
    before = os.getcwd()
    if rank == 0:
        yield before
        return
    path = rank_dir(run_dir, rank)
    if not is_local(run_dir):
        private_dir(node_root())  # refused if another user holds it, or it is a link
    os.makedirs(path, exist_ok=True)
    _link_entries(before, path)
    os.chdir(path)
    pwd = os.environ.get("PWD")
    os.environ["PWD"] = path
    try:
        yield path
    finally:
        os.chdir(before)
        if pwd is None:
            os.environ.pop("PWD", None)
        else:
            os.environ["PWD"] = pwd


def _link_entries(source: str, target: str) -> None:
    """A link in ``target`` to each entry of ``source`` it has nothing of its own for.

    Links an earlier attempt made (absolute, to an entry of the same name) follow
    ``source`` now: re-pointed where it has the entry, removed where it has not (the
    old job directory may be gone, or hold what was since deleted)."""
    names = set(os.listdir(source))
    for name in os.listdir(target):
        link = os.path.join(target, name)
        if name not in names and _made_here(link, name):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(link)
    for name in names:
        link = os.path.join(target, name)
        want = os.path.join(source, name)
        if not os.path.lexists(link):
            with contextlib.suppress(FileExistsError):
                os.symlink(want, link)
        elif _made_here(link, name) and os.readlink(link) != want:
            spare = f"{link}.raytf-{uuid.uuid4().hex[:8]}"
            os.symlink(want, spare)
            os.replace(spare, link)  # a rename: the link never missing in between
        # else: this rank's own file, or a link already to ``want``


def _made_here(link: str, name: str) -> bool:
    """Whether ``link`` is one ``_link_entries`` made: a link to ``<directory>/<name>``."""
    try:
        to = os.readlink(link)
    except OSError:
        return False  # not a link: the rank's own
    return os.path.isabs(to) and os.path.basename(to) == name
