"""Committed checkpoints: the driver's side of coordinated saving.

A checkpoint is the directory ``checkpoints/step_<N>/`` under the run. Each
writer (the chief its real TF files, every rank its own small RNG-state file)
writes its part into a folder of its own, unique per write (``stage_name``),
and the driver *commits* the step once every rank has reported its part by
creating ``manifest.json``, whole and only if absent
(``Storage.create_exclusive``). The manifest names each file with its size and,
where it is not at the step directory's top, the folder it is in (``at``).
Nothing a manifest names is ever written again, so a writer that passed the
"is it committed?" check just before a commit landed, or a late part of an
older attempt, cannot change a committed checkpoint; a checkpoint truncated or
partly deleted later is recognised (sizes) and skipped. Only committed, intact
checkpoints are ever restored or counted by ``num_to_keep``.

Where a part is written depends on the store (``parts_stay``). An object store
has no rename: a part is written inside the step's directory
(``step_<N>/rank<R>-<id>/``) and stays there; the commit moves no byte, its
cost one small write whatever the checkpoint's size. A local or shared file
system renames for free: parts are staged apart
(``checkpoints/.staging/step_<N>/rank<R>-<id>/``) and the commit renames them
into one flat directory that appears whole (``raytf.checkpoint.staging``).
Readers go through the manifest (``stored``, ``fetch``), which lays either
layout out flat on local disk: the TF prefix beside the state files.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from dataclasses import dataclass

from raytf.checkpoint import staging
from raytf.checkpoint.staging import StagedPartGone
from raytf.messages import CheckpointPart
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")

CKPT_DIR = "checkpoints"
MANIFEST = "manifest.json"
SCORES = "scores.json"  # each kept checkpoint's score, by step (CheckpointConfig's attribute)
TF_PREFIX = "ckpt"  # TF writes ckpt.index and ckpt.data-*
# Under CKPT_DIR: parts waiting for their commit. Not a step's name, so never listed as one.
STAGING = ".staging"
ASSEMBLED = "assembled"  # in a step's staging: its files gathered by a local commit
COMMITTED_ALREADY = "it is committed already and a committed checkpoint is never written again"
_STEP_RE = re.compile(r"^step_(\d+)$")


def step_dirname(step: int) -> str:
    """The directory of the checkpoint taken after global step ``step``."""
    return f"step_{step:09d}"


def parse_step_dirname(name: str) -> int | None:
    """The step a checkpoint directory's name holds, or None for any other name."""
    m = _STEP_RE.match(name)
    return int(m.group(1)) if m else None


def stage_name(rank: int) -> str:
    """A writer's own staging directory: unique per write, so two writers of one step
    (a restarted attempt's and a late one of the attempt before) never share a file,
    and a commit moves exactly the files the part it was handed lists."""
    return f"rank{rank}-{uuid.uuid4().hex[:12]}"


def parts_stay(storage: Storage) -> bool:
    """Are parts written where they stay? On an object store, yes: a copy there costs
    the checkpoint's bytes (s3fs copies objects over 150 MB serially, in 50 MB parts:
    minutes for 15 GB), so nothing moves and the manifest says where each file is. A
    local or shared file system renames: parts are staged apart, then gathered."""
    return not storage.local


def staged_dir(storage: Storage, step: int, name: str) -> tuple[str, ...]:
    """Where the writer ``name`` (``stage_name``) writes its part of ``step``, relative
    to the checkpoints' directory (``parts_stay``); its ``CheckpointPart.staged`` names
    it. Both sides ask this: the writer where to write, the commit where to look."""
    if parts_stay(storage):
        return (step_dirname(step), name)
    return (STAGING, step_dirname(step), name)


def stored(manifest: dict, name: str) -> tuple[str, ...]:
    """Where a committed file ``name`` is, relative to its step directory: in the folder
    its writer wrote it to (``at``: parts that stay), else at the top (a local commit's
    gathering, and every layout before parts stayed)."""
    folder = manifest.get("at", {}).get(name)
    return (folder, name) if folder else (name,)


def fetch(step: Storage, local_dir: str, manifest: dict, names: list[str] | None = None) -> None:
    """Copy a committed checkpoint's files (or only ``names``) from ``step`` (its
    directory) flat into ``local_dir``, wherever in it the store holds them: what every
    reader reads (``tf.train.Checkpoint.read`` of ``ckpt`` beside the state files)."""
    names = list(manifest["files"]) if names is None else names
    step.download_files(local_dir, {name: stored(manifest, name) for name in names})


def copy_flat(storage: Storage, *parts: str, dest: str) -> None:
    """A committed checkpoint's directory (``parts`` under ``storage``) copied flat into
    the local ``dest``, its manifest last and saying so (no ``at``): a checkpoint of the
    layout every reader reads, for Tune to keep and hand back, or a user to open. Any
    other directory (flat already, or not a raytf checkpoint) is copied as it is."""
    manifest = None
    if storage.exists(*parts, MANIFEST):
        try:
            manifest = storage.read_json(*parts, MANIFEST)
        except ValueError:  # a file of that name that is not raytf's
            manifest = None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("at"), dict):
        storage.download_tree(dest, *parts)
        return
    fetch(Storage(storage.url(*parts)), dest, manifest)
    with open(os.path.join(dest, MANIFEST), "w") as f:
        json.dump({k: v for k, v in manifest.items() if k != "at"}, f, indent=1)


def staged_steps(storage: Storage) -> list[int]:
    """Steps with staged parts (uncommitted, or left over by a commit that could not
    clean up): what ``prune`` and ``clear_staging`` remove."""
    return steps_in(storage.listdir(CKPT_DIR, STAGING))


class StepCommitted(Exception):
    """Parts handed to ``commit`` for a step that has a manifest already."""


@dataclass(frozen=True)
class CommittedCheckpoint:
    step: int
    path: str  # URL or local path of the step directory
    manifest: dict
    commit_s: float | None = None  # what ``commit`` took (None: found committed, not made)


def steps_in(names: list[str]) -> list[int]:
    return sorted(s for s in map(parse_step_dirname, names) if s is not None)


def list_step_dirs(storage: Storage) -> list[int]:
    return steps_in(storage.listdir(CKPT_DIR))


def safe_name(name: object) -> bool:
    """A manifest's file name that stays inside its step directory: restores turn these
    names into local paths, so never an absolute path, a separator or ``..``."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and not name.startswith("~")
    )


def verify(storage: Storage, step: int) -> dict | None:
    """The manifest of an intact committed checkpoint, or None (uncommitted or damaged).

    A file missing or of another size, or a manifest that does not parse, is damage;
    any other error (a store that fails) is raised: a transient error must never make
    a restart fall back and then write over the newer checkpoints' steps."""
    d = step_dirname(step)
    if not storage.exists(CKPT_DIR, d, MANIFEST):
        return None
    try:
        manifest = storage.read_json(CKPT_DIR, d, MANIFEST)
        at = manifest.get("at", {})
        if not isinstance(at, dict):
            raise ValueError(f"its manifest's at is not a mapping: {at!r:.60}")
        unsafe = [n for n in [*manifest["files"], *at.values()] if not safe_name(n)]
        if unsafe:
            logger.warning("checkpoint at step %d names files outside it (%s); skipping it",
                           step, unsafe[:3])  # fmt: skip
            return None
        for name, size in manifest["files"].items():
            where = (CKPT_DIR, d, *stored(manifest, name))
            if not storage.exists(*where) or storage.size(*where) != size:
                logger.warning("checkpoint at step %d is damaged (%s); skipping it", step, name)
                return None
    except (FileNotFoundError, ValueError, KeyError, TypeError) as exc:
        logger.warning("checkpoint at step %d is unreadable (%s); skipping it", step, exc)
        return None
    if manifest.get("bad"):
        return None
    return manifest


def is_committed(storage: Storage, step: int, ckpt_dir: str = CKPT_DIR) -> bool:
    """Has the checkpoint at ``step`` a manifest? Then its directory is never written
    again: every writer asks before it stages anything (a step label seen twice, a late
    save), which spares the write; what keeps a committed checkpoint byte for byte what
    its manifest describes is that only a commit moves files into a step's directory."""
    return storage.exists(ckpt_dir, step_dirname(step), MANIFEST)


def refused_line(rank: int, step: int, what: str) -> str:
    """What a rank says when it does not write a step that is committed already."""
    return (
        f"[raytf] rank {rank}: {what} at step {step} not written: step {step} is committed "
        "already and a committed checkpoint is never written again"
    )


def committed(storage: Storage) -> list[int]:
    """Steps that have a manifest (intact or not): what retention counts."""
    return [
        s for s in list_step_dirs(storage) if storage.exists(CKPT_DIR, step_dirname(s), MANIFEST)
    ]


def latest_intact(storage: Storage, skip: set[int] = frozenset()) -> CommittedCheckpoint | None:
    """The newest committed checkpoint whose files are all there, newest first."""
    return newest_intact(storage, skip)[0]


def newest_intact(
    storage: Storage, skip: set[int] = frozenset()
) -> tuple[CommittedCheckpoint | None, list[int]]:
    """``latest_intact``, and the committed steps newer than it that ``verify`` rejected
    (damaged: a file missing or of another size, a manifest that does not parse)."""
    damaged = []
    for step in reversed(committed(storage)):
        if step in skip:
            continue
        manifest = verify(storage, step)
        if manifest is not None:
            url = storage.url(CKPT_DIR, step_dirname(step))
            return CommittedCheckpoint(step, url, manifest), damaged
        damaged.append(step)
    return None, damaged


def commit(
    storage: Storage,
    parts: list[CheckpointPart],
    *,
    world_size: int,
    attempt: int,
    missing: tuple[int, ...] = (),
    holder: dict | None = None,
) -> CommittedCheckpoint:
    """Write the step's manifest: from now on this checkpoint exists. On a file system
    the parts' staged files are first renamed into the step's directory; on an object
    store they stay where their writers put them and the manifest names each one's
    folder (``at``): the commit moves no byte. ``missing``: ranks whose part is not in it
    (dead before an emergency checkpoint); ``holder``: the run directory's lease holder
    that commits it (``Lease.stamp``), for ``prune``. Raises ``StepCommitted`` for a
    step committed already: its directory is never written again.

    Safe to call again after a failure (a manifest the disk refused): files moved by
    the earlier call are found in place. A part whose files are gone is never
    committed (``StagedPartGone``). A part without ``staged`` was written into
    the step's directory itself, as writers did before staging: nothing of it moves."""
    t0 = time.monotonic()
    steps = {p.step for p in parts}
    if len(steps) != 1 or len({p.rank for p in parts}) + len(missing) != world_size:
        raise ValueError(f"cannot commit: parts {[(p.rank, p.step) for p in parts]}")
    step = steps.pop()
    d = step_dirname(step)
    files: dict[str, int] = {}
    for part in parts:
        files.update(part.files)
    manifest = {
        "step": step,
        "files": files,
        "world_size": world_size,
        "attempt": attempt,
        "reason": parts[0].reason,
        "committed_at": time.time(),
        "save_seconds": max(p.seconds for p in parts),
        "persist_seconds": max(p.persist_seconds for p in parts),
        "missing_ranks": list(missing),
        "host_copies": sorted(p.copy_id for p in parts if p.copy_id),
        # Each part's own staging name, unique per write: what tells this commit's
        # manifest from another's of the same step (``_own``).
        "staged_as": sorted(p.staged for p in parts if p.staged),
    }
    if holder:
        manifest["holder"] = holder
    structure = next((p.structure for p in parts if p.structure), None)
    if structure:  # what a restore compares its model with (raytf.checkpoint.structure)
        manifest["structure"] = structure
    _check_names(parts)
    stay = parts_stay(storage)
    if stay:
        manifest["at"] = {n: p.staged for p in parts if p.staged for n in p.files}
    if is_committed(storage, step):  # nothing moves into a committed directory
        return CommittedCheckpoint(step, storage.url(CKPT_DIR, d), _own(storage, step, manifest))
    if stay:
        _all_there(storage, step, parts)
    else:
        _place(storage, step, parts)
    if not storage.create_json_exclusive(manifest, CKPT_DIR, d, MANIFEST):
        manifest = _own(storage, step, manifest)  # created by an earlier try of this commit?
    if stay:  # folders of writers this commit does not name: an older attempt's, say
        named = {*manifest.get("at", {}).values(), MANIFEST, *manifest["files"]}
        for name in _listing(storage, CKPT_DIR, d):
            if name not in named:
                staging.remove_quietly(storage, (CKPT_DIR, d, name))
    else:
        staging.remove_quietly(storage, (CKPT_DIR, STAGING, d))  # emptied, or leftovers
    return CommittedCheckpoint(step, storage.url(CKPT_DIR, d), manifest, time.monotonic() - t0)


def drop_parts(storage: Storage, step: int, parts: list[CheckpointPart]) -> None:
    """Remove what parts never to be committed wrote (late ones of a step committed or
    passed): best effort, and never a folder the step's manifest names (a part handed
    twice is the committed one)."""
    d = step_dirname(step)
    if not parts_stay(storage):
        staging.remove_quietly(storage, (CKPT_DIR, STAGING, d))
        return
    try:
        named = set(storage.read_json(CKPT_DIR, d, MANIFEST).get("at", {}).values())
    except FileNotFoundError:
        named = set()
    except Exception:  # noqa: BLE001 - unreadable now: leave it to the next prune
        return
    for part in parts:
        if part.staged and safe_name(part.staged) and part.staged not in named:
            staging.remove_quietly(storage, (CKPT_DIR, d, part.staged))


def _listing(storage: Storage, *parts: str) -> list[str]:
    try:
        return storage.listdir(*parts)
    except Exception:  # noqa: BLE001 - only leftovers are looked for: the next prune's
        return []


def _check_names(parts: list[CheckpointPart]) -> None:
    """Every name a part gives stays inside its folder (manifests become local paths)."""
    for part in parts:
        names_ok = part.staged is None or (safe_name(part.staged) and part.staged != ASSEMBLED)
        if not names_ok or not all(safe_name(n) for n in part.files):
            raise ValueError(f"cannot commit: rank {part.rank}'s part names {part.staged!r}")


def _all_there(storage: Storage, step: int, parts: list[CheckpointPart]) -> None:
    """Parts that stay: every file each reported is in its folder, asked with one listing
    of the step's directory (a thousand ranks' parts: one paginated listing, not a
    thousand)."""
    d = step_dirname(step)
    there = set(storage.files_under(CKPT_DIR, d))
    for part in parts:
        folder = () if part.staged is None else (part.staged,)
        lost = sorted(n for n in part.files if "/".join((*folder, n)) not in there)
        if lost:
            raise StagedPartGone(f"staged file {'/'.join((CKPT_DIR, d, *folder, lost[0]))} is gone")


def _own(storage: Storage, step: int, mine: dict) -> dict:
    """The manifest of a step committed already: the one an earlier try of this commit
    wrote (its answer lost: a timeout after the write), or ``StepCommitted``."""
    there = storage.read_json(CKPT_DIR, step_dirname(step), MANIFEST)
    same = ("staged_as", "files", "attempt", "holder", "world_size", "missing_ranks")
    if all(there.get(k) == mine.get(k) for k in same):
        return there
    raise StepCommitted(f"checkpoint parts of step {step} not committed: {COMMITTED_ALREADY}")


def _place(storage: Storage, step: int, parts: list[CheckpointPart]) -> None:
    """The staged files into ``step_<N>/`` on a local or shared file system: gathered
    in the step's staging, then renamed into place as one directory, the manifest
    written after them being what makes the step committed."""
    d = step_dirname(step)
    moves = []
    for part in parts:
        if part.staged is None:
            continue  # written in place
        moves += [((CKPT_DIR, STAGING, d, part.staged, n), n) for n in part.files]
    whole = all(p.staged is not None for p in parts)
    gather = (CKPT_DIR, STAGING, d, ASSEMBLED) if whole else None
    staging.move_in(storage, moves, (CKPT_DIR, d), gather)


def clear_staging(storage: Storage) -> None:
    """Remove every staged part: at the start of a driver's second and later attempts,
    when no part of the attempts before can be committed (their pending ones dropped)."""
    storage.remove(CKPT_DIR, STAGING)
