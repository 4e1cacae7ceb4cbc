"""A file that only grows, kept on an object store as immutable segments.

An object store cannot append: uploading the whole file at each flush makes a
run's traffic grow with the square of its length (a week of 512 rank logs is
gigabytes per flush). So ``NAME`` is kept as ``NAME.parts/FIRST-LAST``: each
flush uploads only the bytes written since the last one, as the segment of
sequence number ``FIRST = LAST``; every ``MERGE_EVERY`` segments the writer
uploads their bytes once more as one segment ``FIRST-LAST`` and deletes them
(one call), so a reader lists and fetches a few hundred objects for a week, not
tens of thousands. A reader that meets both a merged segment and the segments it
replaced (the deletes not done yet) takes the merged one: each byte is read once.

A whole object ``NAME`` (written by raytf before segments) is read first. On a
local (or shared) file system the file is appended to in place and read as one
file; these functions read both layouts the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from raytf.rundir.storage import Storage

PARTS_SUFFIX = ".parts"
MERGE_EVERY = 256
_PART_RE = re.compile(r"^(\d{12})-(\d{12})$")


def part_name(first: int, last: int) -> str:
    return f"{first:012d}-{last:012d}"


def parts_dir(name: str) -> str:
    return name + PARTS_SUFFIX


def _ranges(storage: Storage, *parts: str) -> list[tuple[int, int, str]]:
    """(first, last, name) of every segment there is, in any order."""
    *head, name = parts
    found = []
    for entry in storage.listdir(*head, parts_dir(name)):
        m = _PART_RE.match(entry)
        if m:
            found.append((int(m.group(1)), int(m.group(2)), entry))
    return found


def cover(found: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The segments to read, in order, each sequence number once: the widest first where
    a merged segment and the ones it replaced are both there."""
    out, covered = [], -1
    for first, last, name in sorted(found, key=lambda r: (r[0], -r[1])):
        if first > covered:
            out.append((first, last, name))
            covered = last
    return out


def last_sequence(storage: Storage, *parts: str) -> int:
    """The newest segment's sequence number (-1: none): a continuing writer goes on after it."""
    return max((last for _, last, _ in _ranges(storage, *parts)), default=-1)


def exists(storage: Storage, *parts: str) -> bool:
    return storage.exists(*parts) or bool(_ranges(storage, *parts))


def read(storage: Storage, *parts: str) -> bytes:
    """The whole file: the whole object (if any), then every segment in order."""
    return read_new(storage, Position(), *parts)


@dataclass
class Position:
    """How much of a file a follower has read: bytes of the whole object, then segments
    by sequence number (with each one's length, to skip them inside a merged one)."""

    whole: int = 0
    last: int = -1
    lengths: dict[int, int] = field(default_factory=dict)


def read_new(storage: Storage, position: Position, *parts: str) -> bytes:
    """What the file gained since ``position`` (updated): new segments only, each fetched
    once; the whole object read past its offset."""
    chunks = []
    path = storage.path(*parts)
    if storage.exists(*parts):
        if storage.local:
            with open(path, "rb") as f:
                f.seek(position.whole)
                chunks.append(f.read())
        else:
            chunks.append(storage.fs.cat_file(path)[position.whole :])
        position.whole += len(chunks[0])
    if storage.local:
        return b"".join(chunks)
    *head, name = parts
    for first, last, seg in cover(_ranges(storage, *parts)):
        if last <= position.last:
            continue
        got = storage.fs.cat_file(storage.path(*head, parts_dir(name), seg))
        if first <= position.last:  # merged since: skip what was read as its own segments
            done = range(first, position.last + 1)
            got = got[sum(position.lengths.pop(s, 0) for s in done) :]
        elif first == last:  # a merge may replace it later
            position.lengths[first] = len(got)
        chunks.append(got)  # joined once: a week's log is hundreds of segments
        position.last = last
    return b"".join(chunks)
