"""Which committed checkpoints stay: retention (``num_to_keep``, best by score), the
marks of damaged ones, and fencing by the lease's generation.

Only intact checkpoints count toward ``num_to_keep`` (a damaged or bad one never
takes the place of a fresh one), the step just committed never goes, and a commit
of a later lease holder (a driver that took the run over) is never removed by an
earlier one.
"""

from __future__ import annotations

import math

from raytf.checkpoint.layout import (
    CKPT_DIR,
    MANIFEST,
    STAGING,
    committed,
    staged_steps,
    step_dirname,
    steps_in,
)
from raytf.rundir.storage import Storage


def mark_bad(storage: Storage, step: int, why: str) -> None:
    """A committed checkpoint that failed to restore is never tried again."""
    d = step_dirname(step)
    manifest = storage.read_json(CKPT_DIR, d, MANIFEST)
    manifest["bad"] = why
    storage.write_json_atomic(manifest, CKPT_DIR, d, MANIFEST)


def ranked(steps: list[int], scores: dict[int, float | None], order: str) -> list[int]:
    """``steps`` best first by score (``order`` "max" or "min"); those without a finite
    score last, newest first among equals."""
    sign = -1.0 if order == "max" else 1.0

    def key(step: int) -> tuple:
        score = scores.get(step)
        unranked = score is None or not math.isfinite(score)  # NaN would break the order
        return (unranked, 0.0 if unranked else sign * score, -step)

    return sorted(steps, key=key)


def to_drop(
    done: list[int],
    num_to_keep: int | None,
    scores: dict[int, float | None] | None,
    order: str,
    last: int | None = None,
) -> list[int]:
    """The committed steps beyond ``num_to_keep``: the oldest, or with ``scores`` the worst
    of those already scored (a checkpoint whose score is not known yet stays). The newest,
    and ``last`` (the one just committed, older than the newest after a fall back),
    always stay: a restart resumes from it."""
    if num_to_keep is None or len(done) <= num_to_keep:
        return []
    if scores is None:
        drop = done[: len(done) - num_to_keep]
    else:
        scored = [s for s in done if s in scores]
        keep = set(ranked(scored, scores, order)[:num_to_keep]) | {done[-1]}
        drop = [s for s in scored if s not in keep]
    return [s for s in drop if s != last]


def prune(
    storage: Storage,
    num_to_keep: int | None,
    scores: dict[int, float | None] | None = None,
    order: str = "max",
    bad: set[int] = frozenset(),
    done: list[int] | None = None,
    generation: int | None = None,
    last: int | None = None,
) -> list[int]:
    """Delete committed checkpoints beyond ``num_to_keep`` and abandoned partial ones;
    never ``last``, the step just committed (``to_drop``).

    ``done``: the committed steps, as the caller (the driver) knows them; without it
    each one's manifest is looked up, one storage call per checkpoint. With it a prune
    costs one listing and a delete per checkpoint dropped, however many are kept.

    Only intact checkpoints count: ``bad`` ones (marked after a failed restore)
    never take a place, so a fallback cannot make retention delete the fresh
    commits that followed it; a bad one goes once it is older than every kept one.
    A directory without a manifest older than the newest commit is the remains
    of a save interrupted by a failure; one newer may still be being written. A
    directory missing from ``done`` is looked at first: with a manifest it is a commit
    the caller did not see (a listing that lagged), never removed here.
    Staged parts of a step at or before the newest commit are never committed
    (a step older than the latest is not, nor is one committed already): removed.

    ``generation``: the pruning driver's lease generation. A commit whose manifest
    names a later one is another driver's, which took the run over while this one
    stalled: it is never removed here.
    """
    done = committed(storage) if done is None else sorted(set(done))
    good = [s for s in done if s not in bad]
    drop = to_drop(good, num_to_keep, scores, order, last)
    kept = [s for s in good if s not in drop]
    drop += [s for s in done if s in bad and kept and s < kept[0]]
    removed = []
    for step in drop:
        if generation is not None and _later_holder(storage, step, generation):
            continue
        storage.remove(CKPT_DIR, step_dirname(step))
        removed.append(step)
    newest = done[-1] if done else -1
    names = storage.listdir(CKPT_DIR)
    for step in steps_in(names):
        if step < newest and step not in done:
            if storage.exists(CKPT_DIR, step_dirname(step), MANIFEST):
                continue  # a commit the caller's list missed: not the remains of a save
            storage.remove(CKPT_DIR, step_dirname(step))
            removed.append(step)
    if newest >= 0 and STAGING in names:
        for step in staged_steps(storage):
            if step <= newest:
                storage.remove(CKPT_DIR, STAGING, step_dirname(step))
    return sorted(removed)


def _generation(storage: Storage, step: int) -> int:
    """The lease generation of the driver that committed ``step`` (0: none named)."""
    manifest = storage.read_json(CKPT_DIR, step_dirname(step), MANIFEST)
    return int((manifest.get("holder") or {}).get("generation", 0))


def _later_holder(storage: Storage, step: int, generation: int) -> bool:
    """Did a driver of a later lease generation commit ``step``? A manifest that cannot
    be read now counts as one (the directory stays: the next prune looks again); one
    that is not there is not a commit."""
    try:
        return _generation(storage, step) > generation
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True


def highest_generation(storage: Storage) -> int:
    """The highest lease generation the run directory's commits carry."""
    highest = 0
    for step in committed(storage):
        try:
            highest = max(highest, _generation(storage, step))
        except (OSError, ValueError):
            continue
    return highest


def marked_bad(storage: Storage, steps: list[int]) -> set[int]:
    """Which of these committed checkpoints a driver marked bad (read from their manifests)."""
    out = set()
    for step in steps:
        try:
            if storage.read_json(CKPT_DIR, step_dirname(step), MANIFEST).get("bad"):
                out.add(step)
        except (OSError, ValueError):
            continue
    return out
