"""The driver's checkpoint bookkeeping: collect parts, commit, prune, and say when to save.

Parts of one attempt never mix with another's: a restart clears whatever was
pending (and the files its earlier attempts staged), so a save
interrupted by a failure simply never commits and the previous committed
checkpoint stays the latest. Parts for a step committed already, or older
than the latest commit, are left out, said, and their staging removed.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable

from raytf.checkpoint.layout import (
    CKPT_DIR,
    COMMITTED_ALREADY,
    SCORES,
    CommittedCheckpoint,
    StepCommitted,
    clear_staging,
    commit,
    committed,
    drop_parts,
    newest_intact,
    step_dirname,
)
from raytf.checkpoint.retention import mark_bad, marked_bad, prune, ranked
from raytf.checkpoint.staging import StagedPartGone
from raytf.config import CheckpointConfig
from raytf.messages import CheckpointPart, CheckpointPlan
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")

# raytf's own interval, when the config sets none: the first save a minute in, then
# 100 times the last save's seconds, at least every 30 minutes.
CHOSEN_MIN_S = 60.0
CHOSEN_MAX_S = 1800.0
COMMIT_TRIES = 5  # a manifest write: tried at polls 1, 2, 4 and 8 s apart, then given up


class CheckpointCommits:
    def __init__(
        self,
        storage: Storage,
        config: CheckpointConfig,
        world_size: int,
        on_commit: Callable[[CommittedCheckpoint], None] | None = None,
        say: Callable[[str], None] = logger.warning,
        holds: Callable[[], bool] = lambda: True,
        holder: dict | None = None,
    ):
        self.storage = storage
        self.holds = holds  # the run's lease is still this driver's: asked before a commit
        self.holder = holder  # the lease's holder id and generation (Lease.stamp)
        self.on_commit = on_commit  # told of every commit, an emergency one included
        self.say = say  # a line for the user: a checkpoint refused or not written
        self.config = config
        self.world_size = world_size
        # The committed checkpoints that exist (pruned ones leave): what status lists.
        self.kept: list[int] = committed(storage)
        self.bad: set[int] = marked_bad(storage, self.kept)  # never counted by retention
        self.latest: CommittedCheckpoint | None = None
        self.restore_point()
        # Complete checkpoints whose manifest could not be written yet: step -> (parts,
        # tries, when to try again). A newer commit or a new attempt drops them.
        self._unwritten: dict[int, tuple[list[CheckpointPart], int, float]] = {}
        self.save_seconds: list[float] = []
        self._pending: dict[int, dict[int, CheckpointPart]] = defaultdict(dict)
        self._last_save = time.monotonic()
        self._requested_at: float | None = None
        self._scored: list[tuple[int, float]] = []  # every (step, score) not yet decided on
        self._reported_step = -1  # rank 0's newest reported step
        # Scores decided so far, kept in the run directory: a driver that continues the
        # run ranks the checkpoints of the one before it as that one did.
        self._decided: dict[int, float | None] = {}
        self._scores_unwritten = False
        self.copy_cost: tuple[float, float] | None = None  # the emergency copy's, once measured
        self._started, self._attempts = time.monotonic(), 0  # the time between restarts
        if config.checkpoint_score_attribute and storage.exists(CKPT_DIR, SCORES):
            self._decided = self._saved_scores()

    def _saved_scores(self) -> dict[int, float | None]:
        """The scores the run's earlier drivers decided; a file that is not what raytf
        writes (step -> number or null) is set aside with a warning naming it, and the
        kept checkpoints rank as unscored, never a crash."""
        try:
            saved = self.storage.read_json(CKPT_DIR, SCORES)
            scores = {int(k): v for k, v in saved.items()}
            if not all(v is None or isinstance(v, (int, float)) for v in scores.values()):
                raise ValueError("a score that is not a number")
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            url = self.storage.url(CKPT_DIR, SCORES)
            logger.warning("ignoring %s: not a scores file raytf wrote (%s)", url, exc)
            return {}
        return {k: v for k, v in scores.items() if k in self.kept}

    def note_report(self, metrics: dict) -> None:
        """Rank 0's report: its step, and its score if it carries the score attribute."""
        attr = self.config.checkpoint_score_attribute
        value, step = metrics.get(attr) if attr else None, metrics.get("step")
        if not isinstance(step, int):
            return
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            self._scored.append((step, float(value)))
        if step > self._reported_step:
            self._reported_step = step
            self.scores()  # decides (and stores) the scores of the checkpoints it passed

    def _score_of(self, ckpt_step: int) -> float | None:
        before = [value for step, value in self._scored if step <= ckpt_step]
        return before[-1] if before else None

    def scores(self, final: bool = False) -> dict[int, float | None] | None:
        """Each kept checkpoint's score: rank 0's last report of the attribute at or before
        its step (None: never reported). Decided once rank 0 reported a later step (its
        reports of that step are all in: an epoch's end comes after its last batch's), or
        at the end of the run (``final``); until then the checkpoint is left out."""
        if not self.config.checkpoint_score_attribute:
            return None
        grew = False
        for ckpt_step in self.kept:
            if ckpt_step not in self._decided and (final or self._reported_step > ckpt_step):
                self._decided[ckpt_step] = self._score_of(ckpt_step)
                grew = True
        if grew or self._scores_unwritten:
            doc = {str(k): v for k, v in self._decided.items() if k in self.kept}
            try:
                self.storage.write_json_atomic(doc, CKPT_DIR, SCORES)
                self._scores_unwritten = False
            except Exception as exc:  # noqa: BLE001 - kept in memory; written at the next decision
                self._scores_unwritten = True
                logger.warning("could not write %s: %s", SCORES, exc)
        return {s: self._decided[s] for s in self.kept if s in self._decided}

    def best(self) -> list[tuple[int, float | None]]:
        """Kept checkpoints best first by score (newest first without a score attribute)."""
        scores = self.scores(final=True)
        if scores is None:
            return [(s, None) for s in sorted(self.kept, reverse=True)]
        order = ranked(list(self.kept), scores, self.config.checkpoint_score_order)
        return [(s, scores.get(s)) for s in order]

    def best_checkpoints(self) -> list[tuple[str, float | None]]:
        """``Result.best_checkpoints``: each kept checkpoint's directory and score, best first."""
        return [(self.storage.url(CKPT_DIR, step_dirname(s)), score) for s, score in self.best()]

    def plan(self, keep_last_step: bool = False, every: int | None = None) -> CheckpointPlan:
        """What each worker's checkpointer needs: where, how often, what to restore, and
        whether to keep each step's state for an emergency checkpoint (every ``every``
        steps; None: as often as the copy is cheap, ``raytf.checkpoint.copy_cadence``, from
        its cost as an earlier attempt of this run measured it and the run's time between
        restarts so far, else measured again)."""
        restarts = self._attempts - 1
        between = (time.monotonic() - self._started) / restarts if restarts > 0 else None
        return CheckpointPlan(
            dir=CKPT_DIR,
            every_steps=self.config.checkpoint_every_steps,
            async_save=self.config.async_save,
            restore_url=self.latest.path if self.latest else None,
            keep_last_step=keep_last_step,
            last_step_every=every,
            copy_cost=self.copy_cost,
            failure_interval_s=between,
            refuse_nonfinite=self.config.refuse_nonfinite,
            saved_model=self.config.export_saved_model,
            attempt=max(1, self._attempts),
        )

    def restore_point(self) -> CommittedCheckpoint | None:
        """The newest committed checkpoint whose files are intact (re-checked every time).
        Each newer one was found damaged: it counts as bad, never as one of the newest
        that retention keeps (which would drop the commits made after falling back)."""
        self.latest, damaged = newest_intact(self.storage, skip=self.bad)
        self.bad |= set(damaged)
        return self.latest

    def new_attempt(self, world_size: int) -> None:
        """An elastic group's size may differ from one attempt to the next."""
        self.world_size = world_size
        self._attempts += 1
        self._pending.clear()
        self._unwritten.clear()  # a restart may save the same steps again
        self._requested_at = None
        self._last_save = time.monotonic()
        # Nothing this driver's earlier attempts staged can be committed now. Before its
        # first attempt no file is touched (a run refused at its start, another model,
        # changes nothing): a previous driver's leftovers go at the first commit's prune.
        if self._attempts > 1 and self.holds():
            try:
                clear_staging(self.storage)
            except Exception as exc:  # noqa: BLE001 - storage: the next prune removes them
                logger.warning("could not remove the staged checkpoint parts: %s", exc)

    def on_parts(self, parts: list[CheckpointPart], *, attempt: int) -> list[CommittedCheckpoint]:
        """Collect parts; commit each step every rank has stored. A manifest that cannot
        be written (storage away, a full disk) is tried again at later polls with
        backoff, then given up and said so: training goes on either way."""
        done = []
        for part in parts:
            self._pending[part.step][part.rank] = part
        now = time.monotonic()
        ready = {}
        for step in [s for s in self._pending if len(self._pending[s]) == self.world_size]:
            ready[step] = (list(self._pending.pop(step).values()), 0)
        due = {s: (p, n) for s, (p, n, at) in self._unwritten.items() if at <= now}
        for step, (ranks, tries) in sorted({**due, **ready}.items()):
            self._unwritten.pop(step, None)
            if step in self.kept or (self.latest is not None and step <= self.latest.step):
                if step in ready:  # a manifest owed since before the newer commit is not
                    self.say(self._late(step))
                    drop_parts(self.storage, step, ranks)
                continue
            ckpt = self._commit(step, ranks, tries, attempt)
            if ckpt is not None:
                done.append(ckpt)
        return done

    def _late(self, step: int) -> str:
        """Why the parts of ``step`` are not committed: never dropped without a word."""
        why = (
            COMMITTED_ALREADY
            if step in self.kept
            else f"the newer step {self.latest.step} is committed already"
        )
        return f"checkpoint parts of step {step} not committed: {why}"

    def _commit(self, step, ranks, tries: int, attempt: int) -> CommittedCheckpoint | None:
        if self.config.refuse_nonfinite and any(p.finite is False for p in ranks):
            self.say(
                f"checkpoint at step {step} not committed: the model's weights hold NaN or "
                "Inf (CheckpointConfig.refuse_nonfinite); the previous checkpoint stays the latest"
            )
            return None
        if not self.holds():
            return None  # another driver holds the run: its checkpoints are not ours to write
        try:
            ckpt = commit(
                self.storage,
                ranks,
                world_size=self.world_size,
                attempt=attempt,
                holder=self.holder,
            )
        except StepCommitted as exc:  # by another driver meanwhile (the lease taken over)
            self.say(str(exc))
            return None
        except ValueError:
            raise  # parts that do not make a checkpoint: a bug, not storage
        except StagedPartGone as exc:  # no later try brings it back
            self.say(f"checkpoint at step {step} not committed: {exc}")
            return None
        except Exception as exc:  # noqa: BLE001 - any storage error (s3fs raises many kinds)
            tries += 1
            if tries >= COMMIT_TRIES:
                self.say(
                    f"checkpoint at step {step} not committed: its manifest could not be "
                    f"written in {tries} tries ({exc}); the previous checkpoint stays the "
                    "latest, training goes on"
                )
                return None
            wait = min(2.0 ** (tries - 1), 16.0)
            logger.warning("commit of step %d failed (%s), retry in %.0f s", step, exc, wait)
            self._unwritten[step] = (ranks, tries, time.monotonic() + wait)
            return None
        self._committed(ckpt)
        return ckpt

    def _committed(self, ckpt: CommittedCheckpoint) -> None:
        self.latest = ckpt
        self.kept.append(ckpt.step)
        self.bad.discard(ckpt.step)  # a step saved again after a fallback: a new checkpoint
        self.save_seconds.append(ckpt.manifest["save_seconds"])
        self._last_save = time.monotonic()
        self._requested_at = None
        self._unwritten = {s: v for s, v in self._unwritten.items() if s > ckpt.step}
        try:
            order, keep = self.config.checkpoint_score_order, self.config.keep
            generation = None if self.holder is None else self.holder["generation"]
            removed = []
            if self.holds():  # not taken over since this commit: the prune is still ours
                removed = prune(
                    self.storage, keep, self.scores(), order, self.bad, self.kept, generation,
                    last=ckpt.step,
                )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - storage: the next commit prunes again
            logger.warning("pruning after step %d failed: %s", ckpt.step, exc)
            removed = []
        self.kept = [s for s in self.kept if s not in removed]
        self.bad -= set(removed)
        if removed:
            logger.debug("pruned checkpoints %s", removed)
        if self.on_commit is not None:
            self.on_commit(ckpt)

    def commit_emergency(
        self, answers: dict[int, object], dead: set[int], *, attempt: int
    ) -> tuple[CommittedCheckpoint | None, str]:
        """Commit the survivors' emergency parts if they agree and bring something new;
        else (None, why). Decides from what the survivors answered, nothing else."""
        refused = {r: a for r, a in answers.items() if not isinstance(a, CheckpointPart)}
        if refused:
            return None, "; ".join(f"rank {r}: {why}" for r, why in sorted(refused.items()))
        parts = list(answers.values())
        steps = {p.step for p in parts}
        if len(steps) != 1 or len({p.digest for p in parts}) != 1:
            seen = ", ".join(f"rank {p.rank} step {p.step}" for p in parts)
            return None, f"the survivors disagree ({seen})"
        step = steps.pop()
        if self.latest is not None and step <= self.latest.step:
            return None, f"step {step} is not newer than the committed step {self.latest.step}"
        if dead and any(p.own_state for p in parts):
            return None, (
                f"rank(s) {sorted(dead)} kept their own values of variables each worker "
                "updates on its own (BatchNormalization's statistics unless "
                "synchronized=True); they died with them and another rank's would not be "
                "exact: the restart redoes the steps since the latest commit"
            )
        if not self.holds():
            return None, "another driver holds the run directory's lease"
        try:
            ckpt = commit(
                self.storage,
                parts,
                world_size=self.world_size,
                attempt=attempt,
                missing=tuple(dead),
                holder=self.holder,
            )
        except StepCommitted:  # a step marked bad, above the one fallen back to
            return None, f"step {step}: {COMMITTED_ALREADY}"
        except ValueError:
            raise  # parts that do not make a checkpoint: a bug, not storage
        except Exception as exc:  # noqa: BLE001 - storage: the restart reads the last commit
            return None, f"step {step} could not be committed ({type(exc).__name__}: {exc})"
        self._committed(ckpt)
        return ckpt, f"ranks {sorted(answers)} at step {step}"

    @property
    def every_s(self) -> float | None:
        """Seconds between timed saves: the config's, or raytf's choice when it set no
        interval (``CheckpointConfig.chosen_interval``): 100 times what the last save
        took (about 1 % of the time), within [CHOSEN_MIN_S, CHOSEN_MAX_S]."""
        if self.config.checkpoint_every_s is not None:
            return self.config.checkpoint_every_s
        if not self.config.chosen_interval:
            return None
        if not self.save_seconds:
            return CHOSEN_MIN_S
        return min(CHOSEN_MAX_S, max(CHOSEN_MIN_S, 100 * self.save_seconds[-1]))

    def time_due(self, now: float) -> bool:
        """True once per ``every_s``; the caller asks the group to save."""
        every = self.every_s
        if every is None:
            return False
        if self._requested_at is not None and now - self._requested_at < every:
            return False  # asked, not committed yet; a request unanswered this long was lost
        if now - self._last_save >= every:
            self._requested_at = now
            return True
        return False

    def mark_bad(self, step: int, why: str) -> None:
        """Damage only (a restore that read bad files): never another model or storage."""
        self.bad.add(step)
        try:
            mark_bad(self.storage, step, why)
        except Exception as exc:  # noqa: BLE001 - kept in memory for this driver
            logger.warning("could not mark checkpoint %d bad: %s", step, exc)
