"""What a rank does to run a loop: one piece, shared by the worker actor and local mode.

A rank's checkpointer over the run directory, the context its loop reads
(``raytf.get_context()``), the loop run in the rank's working directory, and
when it has finished: the last save stored, the host copy dropped, the final
model written (``save_at_end``: a failed model save is said and the finished
training kept, on a worker and in local mode alike). The actor adds what only
a Ray worker has (MWMS, the poll, liveness sampling, Ray Data shards); local
mode adds a one-device strategy and the driver's bookkeeping in the same
process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raytf.checkpoint import model_out, unbroadcast
from raytf.checkpoint.checkpointer import WorkerCheckpointer
from raytf.checkpoint.host_copy import HostCopy
from raytf.messages import CheckpointPart, CheckpointPlan
from raytf.rundir.storage import Storage
from raytf.worker.context import TrainContext, _ReportBuffer, _set_context
from raytf.worker.user_fn import call_user
from raytf.worker.workdir import own_workdir


def checkpointer_for(plan: CheckpointPlan, *, snapshots: bool = True, **rank) -> WorkerCheckpointer:
    """A rank's checkpointer from the driver's plan: the one place a plan's fields become
    the checkpointer's settings, for a worker and local mode alike (built by hand in
    each, local mode once dropped ``refuse_nonfinite``). ``rank``: what only the rank
    knows (its storage, rank, strategy, parts' sink, node copy)."""
    return WorkerCheckpointer(
        ckpt_dir=plan.dir,
        every_steps=plan.every_steps,
        restore_url=plan.restore_url,
        async_save=plan.async_save and snapshots,
        keep_last_step=plan.keep_last_step and snapshots,
        last_step_every=plan.last_step_every,
        cadence_inputs=(plan.copy_cost, plan.failure_interval_s),
        refuse_nonfinite=plan.refuse_nonfinite,
        **rank,
    )


class RankHost:
    """One rank's loop, from its checkpointer to its final model."""

    def __init__(self) -> None:
        self.buffer = _ReportBuffer()  # what the rank tells its driver, and is told
        self.checkpointer: WorkerCheckpointer | None = None
        self.context: TrainContext | None = None
        self.saved_model = False  # export a SavedModel beside model.keras at the end

    def open(
        self,
        *,
        strategy: Any,
        rank: int,
        world_size: int,
        local_rank: int,
        node_ip: str,
        config: dict,
        run_dir: str,
        plan: CheckpointPlan,
        shards: dict | None = None,
        on_part: Callable[[CheckpointPart], None] | None = None,
        snapshots: bool = True,
        host_copy: HostCopy | None = None,
    ) -> TrainContext:
        """Make the rank's checkpointer from the driver's ``plan`` (its parts go to
        ``on_part``, by default to the buffer the driver polls) and its context, the
        one the loop's ``get_context()`` returns. ``snapshots``: TF's private snapshot
        API probed fine (async saves and the emergency copy need it); ``host_copy``:
        this node's copies in memory (object storage)."""
        self.saved_model = plan.saved_model
        if plan.restore_url is not None:
            # A resumed attempt: the restore overwrites the variables' initial values.
            unbroadcast.until_restored(strategy)
        self.checkpointer = checkpointer_for(
            plan,
            storage=Storage(run_dir),
            rank=rank,
            world_size=world_size,
            strategy=strategy,
            on_part=on_part or self.buffer.put,
            phase=self.buffer.liveness.phase,
            snapshots=snapshots,
            host_copy=host_copy,
            node_leader=local_rank == 0,
        )
        self.context = TrainContext(
            strategy=strategy,
            rank=rank,
            world_size=world_size,
            local_rank=local_rank,
            node_ip=node_ip,
            config=dict(config),
            run_dir=run_dir,
            buffer=self.buffer,
            checkpointer=self.checkpointer,
            shards=shards,
            attempt=plan.attempt,
        )
        _set_context(self.context)
        return self.context

    def call(self, fn: Any, *, watched: bool = True) -> Any:
        """Run the loop in the rank's working directory; what it returned. ``watched``:
        under the rank's liveness (a worker's: progress raytf sees for itself)."""
        ctx = self.context
        assert ctx is not None, "open() first"
        with own_workdir(ctx.run_dir, ctx.rank):  # relative writes from every rank: apart
            if not watched:
                return call_user(fn, config=ctx.config)
            return self.buffer.liveness.run(lambda: call_user(fn, config=ctx.config))

    def end(self) -> None:
        """The loop finished: its last save stored, the host copy dropped (no restart
        will read it), the final model written."""
        if self.checkpointer is None or self.context is None:
            return
        self.checkpointer.flush()
        self.checkpointer.host_copy.drop()
        model_out.save_at_end(self.checkpointer, self.context.rank, self.saved_model)

    def close(self) -> None:
        """The loop's context is no longer current (local mode: the process goes on)."""
        _set_context(None)
