"""Moving a checkpoint's staged files into its step directory at the commit, on a
local or shared file system (an object store moves nothing: its parts stay where
they were written, ``raytf.checkpoint.layout.parts_stay``).

Workers stage their parts beside the committed checkpoints, never inside one
(``raytf.checkpoint.layout`` says where); the driver's commit renames them into
place and only then writes the manifest: each file into one gathering
directory, then that directory to the step's name, one ``os.replace`` (a
step's directory appears whole or not at all), so the step's directory is flat
as every earlier layout was. The moves are the commit's own, so they follow its
rules: safe to try again after a failure (a file already moved is found at its
place), and never partial at a name a reader acts on (nothing in a step
directory counts before its manifest).
"""

from __future__ import annotations

import logging

from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")

Parts = tuple[str, ...]  # a path inside the storage, as Storage's methods take it


class StagedPartGone(FileNotFoundError):
    """A staged file at neither its staged path nor its place: that step cannot be
    committed, however often it is tried (a prune or a new attempt removed it)."""


def move_in(
    storage: Storage, moves: list[tuple[Parts, str]], final: Parts, gather: Parts | None
) -> None:
    """Move each staged file (its path, the name it takes) into ``final``; with
    ``gather``, into that directory first, then ``gather`` renamed to ``final`` (which
    must hold no manifest: the caller asked). A file that is not at its staged path
    but at its place was moved by an earlier try; one at neither is a part lost
    (``StagedPartGone``)."""
    if not moves:
        return
    target = gather or final
    if gather is not None and not storage.exists(*gather) and not storage.exists(*moves[0][0]):
        # Renamed into place by an earlier try (whose manifest write failed), or lost.
        # Asked before any move: a local move makes its target's directory, and a
        # gathering directory made again would then replace the step's.
        lost = [src for src, name in moves if not storage.exists(*final, name)]
        if lost:
            raise StagedPartGone(f"staged file {'/'.join(lost[0])} is gone")
        return

    def move(src: Parts, name: str) -> None:
        try:
            storage.move(src, (*target, name))
        except FileNotFoundError:
            if not storage.exists(*target, name):
                raise StagedPartGone(f"staged file {'/'.join(src)} is gone") from None

    for src, name in moves:
        move(src, name)
    if gather is None:
        return  # moved in place
    if storage.exists(*final):
        # No manifest: the remains of a writer of an older layout (or a test's), none
        # of them listed by these parts. The rename below needs the name free.
        storage.remove(*final)
    storage.move(gather, final)


def remove_quietly(storage: Storage, where: Parts) -> None:
    """Remove a step's staging after its commit: best effort (the next prune, or the
    next attempt's start, removes what a store that failed here left)."""
    try:
        storage.remove(*where)
    except Exception as exc:  # noqa: BLE001 - any storage error: it is only leftovers
        logger.debug("could not remove %s: %s", "/".join(where), exc)
