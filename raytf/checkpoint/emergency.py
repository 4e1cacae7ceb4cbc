"""The emergency checkpoint: what a worker that outlived a dead peer still holds.

When one rank's process dies, the others hold the model at the last step every
rank completed: the dead rank's contribution to the next step's all-reduce
never came, so the survivors are blocked in that collective with their
variables untouched since their last ``step_end``. The driver asks each
survivor for this state before tearing the group down; it commits it only if
every survivor answers with the same step and the same state digest, and that
step is newer than the latest committed checkpoint. The restart then redoes no
completed step.

It runs on the actor's poll thread while the TF thread is blocked, so it must
never start a collective. Where it does not apply (the driver then restarts
from the latest committed checkpoint, as before):
- a hang: a stopped rank may be in the middle of any step;
- every rank lost (a whole-cluster failure), or no survivor answering;
- a step interrupted half-applied: the state committed is the one kept at
  the last ``step_end`` (``LastStep``), never the live variables, and the
  survivors must agree on its step and digest;
- state synchronized on read (Keras metrics created under the strategy):
  reading it is a cross-worker all-reduce, which would wait for the dead peer;
- a loop that never called ``restore`` (nothing is tracked);
- Ray Data input: a shard has no position, so a run resumes at its epoch
  boundaries (docs/data_and_tune.md), never at the step a peer died.
- variables each rank keeps its own values of (``raytf.checkpoint.rank_local``:
  BatchNormalization's statistics unless ``synchronized=True``): the dead rank's
  are gone with it, and another rank's would make the resume inexact, so the
  restart reads the latest full commit (steps redone, exact).
The dead rank's Python and NumPy RNG state is not in it (its process is gone):
its new process starts from the chief's extra state and a fresh RNG, as a rank
new since a resize does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import replace

import numpy as np

from raytf.checkpoint import rank_local, snapshot
from raytf.checkpoint.copy_cadence import Cadence
from raytf.checkpoint.host_copy import is_tf_file
from raytf.checkpoint.layout import TF_PREFIX, stage_name, staged_dir, step_dirname
from raytf.messages import CheckpointPart


def _digest(snap: snapshot.Snapshot) -> str:
    h = hashlib.sha256()
    for tensors in snap.tensors.values():
        for key in sorted(tensors):
            value = tensors[key]
            for t in value.values() if isinstance(value, dict) else [value]:
                h.update(key.encode())
                h.update(np.ascontiguousarray(t.numpy()).tobytes())
    return h.hexdigest()


def _on_read_variables(checkpointer) -> list[str]:
    import tensorflow as tf

    found = []
    for obj in tf.train.TrackableView(checkpointer.ckpt).descendants():
        sync = getattr(obj, "synchronization", None)
        if sync == tf.VariableSynchronization.ON_READ and hasattr(obj, "values"):
            found.append(getattr(obj, "name", repr(obj)))
    return found


class LastStep:
    """The state at the last step its ``Cadence`` copied: every step where that is cheap.

    A snapshot (``raytf.checkpoint.snapshot``) holds each variable's buffer; the next
    step's in-place updates copy it first, so keeping it costs one copy of the
    state per step, on the state's own device: device-memory bandwidth on a GPU,
    a memcpy on a CPU (the examples' model: microseconds; 300 MB of CPU state:
    tens of ms a step). The state's layout is read once (``snapshot.Reader``) and
    again every ``REREAD_LAYOUT_STEPS``; an emergency checkpoint checks that the
    layout still holds (variables made since would be missing from it). Read live
    after a failure instead, the state is not the step's: a step's ops that do not
    wait for its all-reduce (a counter, a metric) have already run.
    """

    REREAD_LAYOUT_STEPS = 1000

    def __init__(self, cadence: Cadence | None = None):
        self.cadence = cadence or Cadence(1, lambda cost: cost)  # every step
        self.latest: tuple[int, snapshot.Snapshot, tuple] | None = None
        self.refused: str | None = None
        self._reader: snapshot.Reader | None = None
        self._read_at: int | None = None  # the step the layout was read at; None: not yet

    def keep(self, checkpointer, step: int) -> None:
        if self.refused is not None:
            return
        if self.latest is None:
            on_read = _on_read_variables(checkpointer)
            if on_read:
                self.refused = f"state synchronized on read ({on_read[:3]}): reading it all-reduces"
                return
        measuring = self.cadence.every is None
        due = self.cadence.copy_now(step, time.monotonic())
        if measuring and self.cadence.every is not None and checkpointer.rank == 0:
            print(self.cadence.describe(), flush=True)
        if not due:
            return
        checkpointer._step_var.assign(step)
        reader = self._reader_for(checkpointer.ckpt, step)
        t0 = time.monotonic()
        snap = reader.read() if reader is not None else snapshot.take(checkpointer.ckpt)
        self.cadence.copy_took(time.monotonic() - t0)
        self.latest = (step, snap, checkpointer._raw_state())  # one assignment: atomic

    def _reader_for(self, ckpt, step: int) -> snapshot.Reader | None:
        stale = self._read_at is None or abs(step - self._read_at) >= self.REREAD_LAYOUT_STEPS
        if stale or (self._reader is not None and self._reader.ckpt is not ckpt):
            self._reader = snapshot.Reader.of(ckpt)  # None: a state read in Python, take()n
            self._read_at = step
        return self._reader

    def layout_changed(self) -> bool:
        """Whether the checkpoint's state has gained or lost values since its layout was
        read (the kept snapshot would then not be the whole state)."""
        reader = self._reader
        return reader is not None and snapshot.signature(reader.ckpt) != reader.signature


def emergency_part(checkpointer, write_tf: bool, committed: int | None = None):
    """This rank's part of a checkpoint at its last completed step (a CheckpointPart),
    or why not.

    ``write_tf``: this rank writes the TF files (the lowest surviving rank: every
    rank's copy of the state is the same). ``committed``: the newest committed
    step; a state no newer is refused before anything is written, so an emergency
    checkpoint never writes into a committed checkpoint's directory.
    """
    keeper = getattr(checkpointer, "last_step", None)
    if checkpointer is None or checkpointer.ckpt is None or keeper is None:
        return "nothing tracked: the loop never called restore()"
    if keeper.refused is not None:
        return keeper.refused
    if keeper.latest is None:
        return "no step completed in this attempt"
    t0 = time.monotonic()
    step, snap, raw = keeper.latest
    if committed is not None and step <= committed:
        return f"step {step} is not newer than the committed step {committed}"
    if checkpointer.committed_already(step):
        return f"step {step} is committed already: a committed checkpoint is never written again"
    if keeper.layout_changed():
        return "the state gained or lost variables since its per-step copy was set up"
    state = checkpointer._state_bytes(raw)
    own = rank_local.KEY in checkpointer._extra
    checkpointer.flush()  # an interval save still being stored goes first
    digest = _digest(snap)
    stored = checkpointer.stored
    if stored is not None and stored.step == step:
        if not write_tf or any(is_tf_file(n) for n in stored.files):
            # This rank's part of that step is already in storage (a save whose commit
            # the death prevented): offer it, rather than write and upload it again.
            took = time.monotonic() - t0
            return replace(
                stored, reason="emergency", seconds=0.0, persist_seconds=took, digest=digest,
                own_state=own,
            )  # fmt: skip
    dirname = step_dirname(step)
    storage = checkpointer.storage
    staged = stage_name(checkpointer.rank)  # staged as every save is (layout.staged_dir)
    where = (checkpointer.ckpt_dir, *staged_dir(storage, step, staged))
    real = storage.path(*where) if storage.local else None
    host = checkpointer.host_copy
    keep = real is None and write_tf and host.enabled
    staging = real or (host.staging() if keep else tempfile.mkdtemp(prefix="raytf-emergency-"))
    copy_id = None
    try:
        os.makedirs(staging, exist_ok=True)
        files = {}
        if write_tf:
            snapshot.write(snap, os.path.join(staging, TF_PREFIX))
            files = {n: os.path.getsize(os.path.join(staging, n)) for n in os.listdir(staging)}
        name = f"state_rank{checkpointer.rank}.json"
        with open(os.path.join(staging, name), "wb") as f:
            f.write(state)
        files[name] = len(state)
        if not storage.local:
            storage.upload_dir(staging, *where)
        if keep:
            copy_id = host.keep(staging, dirname)
    finally:
        if real is None and copy_id is None:
            shutil.rmtree(staging, ignore_errors=True)
    took = time.monotonic() - t0
    rank = checkpointer.rank
    return CheckpointPart(
        rank, step, files, 0.0, "emergency", took, digest, copy_id, staged=staged, own_state=own
    )


def state_file_for(rank: int, names: list[str]) -> str:
    """Which rank's state file a rank restores: its own, else the lowest rank's there."""
    own = f"state_rank{rank}.json"
    if own in names:
        return own
    ranks = sorted(
        int(n[len("state_rank") : -len(".json")]) for n in names if n.startswith("state_rank")
    )
    return f"state_rank{ranks[0]}.json"
