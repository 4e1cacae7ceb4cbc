"""What the controller does with the group when workers fail, before it restarts.

Two actions on a failing group, apart from the loop that calls them: looking
once more for the cause behind a broken collective, and collecting the
survivors' emergency checkpoint after a worker died (``raytf.checkpoint.emergency``
says what it holds and where it cannot apply). The decision whether the
emergency parts may be committed is ``CheckpointCommits.commit_emergency``'s.
"""

from __future__ import annotations

import time

from raytf.driver.failure_policy import FailureKind, classify, pick_root_cause
from raytf.errors import WorkerDiedError
from raytf.messages import WorkerPoll
from raytf.settings import Settings


def root_cause(group, errors: list[BaseException], grace_s: float) -> BaseException:
    """The error to act on; a peer's broken collective is a symptom whose cause (a dead
    worker) is usually a poll away, so look once more and let the failure name it."""
    root = pick_root_cause(errors)
    if classify(root) is FailureKind.COLLECTIVE:
        more = [p for p in group.poll(grace_s, hold=False) if p is not None]
        errors += [p for p in more if isinstance(p, WorkerDiedError)]
        errors += [p.error for p in more if isinstance(p, WorkerPoll) and p.error]
        root = pick_root_cause(errors)
    return root


def emergency_checkpoint(
    group, ckpts, root, errors, world_size: int, attempt: int, settings: Settings
) -> str | None:
    """Ask the survivors of a dead worker for their state and commit it if they agree;
    the line to show (committed, or why not), None where it does not apply."""
    if classify(root) is not FailureKind.WORKER_DIED:
        return None  # a hang or a user error: the state may be anywhere in a step
    dead = {e.rank for e in errors if isinstance(e, WorkerDiedError)}
    alive = [r for r in range(world_size) if r not in dead]
    if not alive:
        return None
    t0 = time.monotonic()
    committed = ckpts.latest.step if ckpts.latest else None
    answers = group.emergency_checkpoint(alive, settings.emergency_timeout_s, committed)
    ckpt, why = ckpts.commit_emergency(answers, dead, attempt=attempt)
    took = time.monotonic() - t0
    if ckpt is None:
        return f"no emergency checkpoint ({why}); {took:.1f} s"
    return f"emergency checkpoint committed: {why}, in {took:.1f} s"
