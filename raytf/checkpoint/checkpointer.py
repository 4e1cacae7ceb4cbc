"""A worker's side of coordinated checkpoints: save at an agreed step, restore exactly.

Every rank saves at the same step (saving may run collectives); when is
decided by ``raytf.checkpoint.schedule`` (intervals, on-demand requests
agreed through TF's coordination service, termination notices).

The chief writes the real TF files; other ranks write theirs to a private
scratch directory and delete it (TF's multi-worker pattern), and every rank
writes its own RNG state file, so nothing collides. Each rank's part goes to a
folder of its own (``raytf.checkpoint.layout.staged_dir``), never to a name a
committed checkpoint holds: the driver's commit makes it part of the step.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from raytf.checkpoint import layout, model_out, rank_local, snapshot, staging, structure
from raytf.checkpoint.copy_cadence import Cadence, agree_through_kv
from raytf.checkpoint.emergency import LastStep
from raytf.checkpoint.host_copy import HostCopy
from raytf.checkpoint.layout import TF_PREFIX, is_committed, refused_line, step_dirname
from raytf.checkpoint.restore import (
    build_optimizers,
    read_committed,
    rng_raw,
    rng_state,
    set_rng_state,
    with_seed_states,
)
from raytf.checkpoint.schedule import SaveSchedule
from raytf.checkpoint.unbroadcast import restored_by, settle
from raytf.checkpoint.writer import CheckpointWriter
from raytf.messages import CheckpointPart
from raytf.rundir.storage import Storage, retrying
from raytf.rundir.storage import cause as storage_cause

logger = logging.getLogger("raytf")


class WorkerCheckpointer:
    def __init__(
        self,
        *,
        storage: Storage,
        ckpt_dir: str,
        rank: int,
        world_size: int,
        strategy,
        every_steps: int | None,
        restore_url: str | None,
        on_part: Callable[[CheckpointPart], None],
        async_save: bool = False,
        keep_last_step: bool = False,
        last_step_every: int | None = 1,
        cadence_inputs: tuple = (None, None),  # the copy's cost as measured, s between restarts
        host_copy: HostCopy | None = None,
        node_leader: bool = False,
        refuse_nonfinite: bool = False,
        phase: Callable[..., AbstractContextManager] | None = None,
    ):
        self.storage = storage
        self.ckpt_dir = ckpt_dir
        self.rank = rank
        self.world_size = world_size
        self.strategy = strategy
        self.schedule = SaveSchedule(rank, world_size, every_steps)
        self.restore_url = restore_url
        self.on_part = on_part
        self.async_save = async_save
        self.last_step = None  # the state kept for an emergency checkpoint
        if keep_last_step:
            agree = agree_through_kv(rank, world_size)
            self.last_step = LastStep(Cadence(last_step_every, agree, *cadence_inputs))
        # Copies in this node's memory (object storage only): the chief keeps what it
        # wrote, the first rank of each other node (``node_leader``) writes its own.
        self.host_copy = host_copy if host_copy and not storage.local else HostCopy("", None)
        self.node_leader = node_leader
        self.restored_from: str | None = None  # "host memory" or "storage", once restored
        self.stored: CheckpointPart | None = None  # this rank's last part in storage
        self._inflight: threading.Thread | None = None  # the async save being stored
        self.ckpt = None
        self.model = None  # the loop's Keras model, once it names one
        self.structure: dict = {}  # what its models hold, by shape (raytf.checkpoint.structure)
        self.refuse_nonfinite = refuse_nonfinite  # check the weights at every save
        # A silent phase for the driver's watchdog (raytf.worker.liveness): restores, saves.
        self.phase = phase or (lambda name, **_: nullcontext())
        self._step_var = None
        self._writer: CheckpointWriter | None = None
        self._extra: dict[str, tuple[Callable[[], object], Callable[[object], None]]] = {}

    # -- set-up ---------------------------------------------------------------
    def start_watchers(self) -> None:
        self.schedule.start_watchers()

    @property
    def notice(self) -> str | None:
        """A termination notice seen anywhere in the group."""
        return self.schedule.notice

    def add_state(self, name: str, get: Callable[[], object], set_: Callable[[object], None]):
        """Per-rank state outside TF's checkpoint (JSON-able), e.g. Keras metric accumulators."""
        if self.ckpt is not None:
            raise RuntimeError("add state before restore(): restoring applies it")
        self._extra[name] = (get, set_)

    def track(self, trackables: dict) -> int:
        """Register what a checkpoint holds; restore it if the run resumes. Returns the step."""
        import tensorflow as tf

        if self.ckpt is not None:
            raise RuntimeError("restore() was already called in this worker")
        self._step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="raytf_step")
        trackables = with_seed_states(trackables)
        self._keep_rank_local(trackables)
        self.ckpt = tf.train.Checkpoint(raytf_step=self._step_var, **trackables)
        self._writer = CheckpointWriter(self.ckpt, trackables)
        self.schedule.last = 0
        self.model = model_out.keras_model(trackables)
        self.structure = structure.describe(trackables)
        step = 0 if self.restore_url is None else self._restore(trackables)
        self.schedule.last = step
        if self.model is not None and self.rank == 0:
            # After the restore: a model that does not fit the run's checkpoints must not
            # replace the architecture they are exported with.
            self._write_architecture()
        return step

    def _keep_rank_local(self, trackables: dict) -> None:
        """Each rank's own values of the variables no reduction keeps equal
        (``raytf.checkpoint.rank_local``), in its state file."""
        variables = rank_local.unreduced(trackables) if self.world_size > 1 else []
        if not variables:
            return
        size = rank_local.size_of(variables)
        if size <= rank_local.LIMIT_BYTES:
            kept = rank_local.RankLocal(variables)
            self._extra[rank_local.KEY] = (kept.get, kept.set_)
        elif self.rank == 0:
            print(
                f"[raytf] {len(variables)} variables each worker updates on its own "
                f"({size / 2**20:.0f} MiB, e.g. {variables[0].path}) are kept as rank 0's "
                "only: a resume gives every worker rank 0's values (not exact)",
                flush=True,
            )

    def _write_architecture(self) -> None:
        try:
            retrying(lambda: model_out.write_architecture(self.storage, self.model), "model file")
        except Exception as exc:  # noqa: BLE001 - training goes on; only export needs it
            print(
                f"[raytf] rank 0: the model's architecture was not written ({exc}); "
                "exporting a checkpoint on the driver needs it (the next start writes it)",
                flush=True,
            )

    def _restore(self, trackables: dict) -> int:
        """Read the committed checkpoint at ``restore_url`` (``raytf.checkpoint.restore``)."""
        t0 = time.monotonic()
        with self.phase("restore", quiet=True):  # restored step counters are not progress
            build_optimizers(trackables, self.strategy)
            self.restored_from = read_committed(
                self.restore_url,
                storage=self.storage,
                host_copy=self.host_copy,
                ckpt=self.ckpt,
                rank=self.rank,
                structure=self.structure,
                apply_state=self._apply_state,
                after_tf_read=lambda: settle(self.strategy, restored_by(self.ckpt)),
            )
        step = int(self._step_var.numpy())
        took = time.monotonic() - t0
        # Printed, not logged: it is how a user (and the tests) see where a restart read from.
        print(
            f"[raytf] rank {self.rank} restored step {step} from {self.restored_from} "
            f"in {took:.2f} s",
            flush=True,
        )
        return step

    def _apply_state(self, name: str, doc: dict) -> None:
        """This rank's state file (``name``: its own, or another rank's)."""
        own = name == f"state_rank{self.rank}.json"
        if own:
            set_rng_state(doc)
        elif rank_local.KEY in self._extra:
            print(
                f"[raytf] rank {self.rank}: its own values of the variables each worker "
                "updates on its own (BatchNormalization's moving statistics unless "
                "synchronized=True) were not in the checkpoint (the rank was lost before "
                f"writing them, or is new): it resumes with those of {name} (not exact)",
                flush=True,
            )
        # Else a rank new since a resize, or one that died before an emergency
        # checkpoint: its RNG starts fresh; the state the group agrees on
        # (all-reduced metric accumulators) is another rank's.
        for key, value in doc.get("extra", {}).items():
            if key in self._extra:
                self._extra[key][1](value)

    # -- the training loop's hook ----------------------------------------------
    def step_end(self, step: int, resumable: bool = True) -> None:
        """``resumable=False``: the loop cannot resume from this step (Keras's ``fit`` only
        starts at an epoch), so no save is taken here: on-demand and emergency ones wait,
        and an interval crossed here is saved at the next resumable step (a run resumed
        from mid-epoch would replay the epoch from its start and overrun its steps)."""
        if self.ckpt is None:
            return
        reason, pending = self.schedule.due(step, resumable)
        if reason:
            self._save(step, reason)
        if pending:
            self.schedule.agree_on_next_step(step, pending)
        if self.last_step is not None and resumable:
            with self.phase("the step's copy for an emergency checkpoint"):
                self.last_step.keep(self, step)

    @property
    def copy_cost(self) -> tuple[float, float] | None:
        """The emergency copy's cost, once the ranks measured it (the driver keeps it for
        the run's next attempts, which then need not measure it again)."""
        return self.last_step.cadence.cost if self.last_step is not None else None

    def request(self, reason: str) -> None:
        """Chief only: save at the next step boundary (called from the actor's poll thread)."""
        self.schedule.request(reason)

    # -- saving -------------------------------------------------------------------
    def save_now(self, step: int, reason: str) -> None:
        """Save at ``step`` at once; every rank must call it at the same step (a session)."""
        if self.ckpt is None:
            raise RuntimeError("nothing to save: call restore(model=..., ...) first")
        self.schedule.saved_at(step)
        self._save(step, reason)

    def _save(self, step: int, reason: str) -> None:
        with self.phase("checkpoint save"):
            self._save_part(step, reason)

    def _save_part(self, step: int, reason: str) -> None:
        """Take this rank's part of the checkpoint at ``step``; report it once stored.

        Synchronous: written (and uploaded) before the loop goes on. Asynchronous:
        a snapshot in host memory, then written and uploaded on a thread of its own;
        at most one persist is in flight (the next save waits for it, and says so).
        A session's save is stored before it returns: its caller asks for it next.
        """
        t0 = time.monotonic()
        self._step_var.assign(step)
        state = self._state_bytes()
        check = self.rank == 0 and self.refuse_nonfinite
        finite = structure.all_finite(self.model) if check else None
        if not self.async_save:
            # Every rank writes, whatever it is told of the step (a save runs collectives).
            committed = self.committed_already(step)
            if self.rank == 0 and not committed:
                write = self._writer.write
            else:
                scratch = tempfile.mkdtemp(prefix=f"raytf-r{self.rank}-")
                self._writer.write(os.path.join(scratch, TF_PREFIX))
                shutil.rmtree(scratch, ignore_errors=True)
                write = None
            self._persist(step, reason, write, state, t0, None, finite, committed)
            return
        waited = self.flush()
        if waited > 0.05:
            logger.warning(
                "rank %d: checkpoint at step %d waited %.2f s for the previous one to be "
                "stored (saves come faster than storage takes them)",
                self.rank,
                step,
                waited,
            )
        snap = snapshot.take(self.ckpt)
        stall = time.monotonic() - t0
        writes = self.rank == 0 or (self.node_leader and self.host_copy.enabled)
        write = (lambda prefix: snapshot.write(snap, prefix)) if writes else None
        self._inflight = threading.Thread(
            target=self._persist,
            args=(step, reason, write, state, t0, stall, finite),
            daemon=True,
            name="raytf-persist",
        )
        self._inflight.start()
        if reason == "session":
            self.flush()

    def flush(self) -> float:
        """Wait until the save in flight (if any) is stored; the seconds waited."""
        t0 = time.monotonic()
        if self._inflight is not None:
            with self.phase("checkpoint save (waiting for the one being stored)"):
                self._inflight.join()
            self._inflight = None
        return time.monotonic() - t0

    def _raw_state(self) -> tuple:
        """This rank's state beside the TF files, as it is now, cheap enough for every
        step: the RNGs' raw state (converted to JSON only by ``_state_bytes``, when it is
        written) and the added state already as JSON (a ``get`` may hand out an object
        it goes on changing)."""
        extra = {name: get() for name, (get, _) in self._extra.items()}
        return rng_raw(), json.dumps(extra)

    def _state_bytes(self, raw: tuple | None = None) -> bytes:
        rng, extra = raw or self._raw_state()
        doc = rng_state(rng)
        doc["extra"] = json.loads(extra)
        return json.dumps(doc).encode()

    def committed_already(self, step: int) -> bool:
        """Is ``step`` committed? Asked before any byte of it is written (or uploaded,
        or kept in host memory). A store that cannot answer is not asked again here:
        the write below meets the same store, retries and says so."""
        try:
            return is_committed(self.storage, step, self.ckpt_dir)
        except Exception:  # noqa: BLE001 - any storage error: the write decides
            return False

    def _persist(
        self, step, reason, write, state: bytes, t0: float, stall, finite=None, committed=None
    ) -> None:
        """Write the TF files (chief) and this rank's state, upload, report the part.

        A part that could not be stored is never reported, so never committed: the
        previous committed checkpoint stays the latest (``committed``: asked already).
        """
        dirname = step_dirname(step)
        if committed is None:
            committed = self.committed_already(step)
        if committed:
            print(refused_line(self.rank, step, "checkpoint"), flush=True)
            return
        # A folder of this write's own: the commit names it (or moves it, on a disk).
        name = layout.stage_name(self.rank)
        where = (self.ckpt_dir, *layout.staged_dir(self.storage, step, name))
        real = self.storage.path(*where) if self.storage.local else None
        files: dict[str, int] = {}

        def fill(folder: str, tf: bool) -> None:
            os.makedirs(folder, exist_ok=True)
            files.clear()
            if tf:
                write(os.path.join(folder, TF_PREFIX))
                if self.rank == 0:  # a node leader's TF files stay on its node
                    files.update(
                        (n, os.path.getsize(os.path.join(folder, n))) for n in os.listdir(folder)
                    )
            state_name = f"state_rank{self.rank}.json"
            with open(os.path.join(folder, state_name), "wb") as f:
                f.write(state)
            files[state_name] = len(state)

        folder, copy_id = real, None
        try:
            if real is not None:
                fill(real, write is not None)
            else:
                folder, in_copy = self.host_copy.fill(fill, write is not None, self.rank == 0)
                self.storage.upload_dir(folder, *where, names=sorted(files))
                if in_copy:
                    copy_id = self.host_copy.keep(folder, dirname)
        except Exception as exc:  # noqa: BLE001 - the checkpoint is lost, training is not
            if real is not None:  # a full disk gets its room back (a store: the next prune)
                staging.remove_quietly(self.storage, where)
            # One line (a full disk fails every save until it has room: no traceback each).
            print(
                f"[raytf] rank {self.rank}: checkpoint at step {step} could not be stored "
                f"({storage_cause(exc)}); the previous committed checkpoint stays the latest",
                flush=True,
            )
            return
        finally:
            if real is None and copy_id is None and folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        took = time.monotonic() - t0
        stall = took if stall is None else stall
        self.stored = CheckpointPart(
            self.rank, step, files, stall, reason, persist_seconds=took, copy_id=copy_id,
            structure=self.structure if self.rank == 0 else None, finite=finite, staged=name,
        )  # fmt: skip
        self.on_part(self.stored)
        logger.info(
            "rank %d saved step %d (%s): loop stalled %.3f s, stored in %.3f s",
            self.rank,
            step,
            reason,
            stall,
            took,
        )
