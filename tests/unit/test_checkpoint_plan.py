"""The driver's checkpoint plan reaches a rank as one typed value (``CheckpointPlan``),
through one function (``raytf.worker.host.checkpointer_for``) that a worker and local
mode both use: a setting added to the plan and not consumed fails here, and no side can
drop one again (local mode once built the checkpointer by hand without
``refuse_nonfinite``)."""

import dataclasses

from raytf.messages import CheckpointPlan
from raytf.worker.host import RankHost
from tests.unit.one_rank import one_rank

# Each field, a value other than its default, and where the rank keeps it.
SEEN = {
    "dir": ("ckpts", lambda host: host.checkpointer.ckpt_dir),
    "every_steps": (7, lambda host: host.checkpointer.schedule.every_steps),
    "async_save": (False, lambda host: host.checkpointer.async_save),
    "restore_url": ("/nowhere/step_000000005", lambda host: host.checkpointer.restore_url),
    "keep_last_step": (True, lambda host: host.checkpointer.last_step is not None),
    "last_step_every": (3, lambda host: host.checkpointer.last_step.cadence.every),
    "copy_cost": (None, lambda host: None),  # used only where last_step_every is None
    "failure_interval_s": (
        9.0,
        lambda host: host.checkpointer.last_step.cadence.failure_interval_s,
    ),
    "refuse_nonfinite": (False, lambda host: host.checkpointer.refuse_nonfinite),
    "saved_model": (True, lambda host: host.saved_model),
    "attempt": (4, lambda host: host.context.attempt),
}


def open_host(storage, plan: CheckpointPlan, **rank) -> RankHost:
    """A rank's host opened with ``plan``, as a worker and local mode open theirs."""
    host = RankHost()
    host.open(**one_rank(run_dir=storage.url(), plan=plan, **rank))
    return host


def test_every_field_of_the_plan_reaches_the_rank(storage):
    fields = [f.name for f in dataclasses.fields(CheckpointPlan)]
    assert sorted(fields) == sorted(SEEN), "a plan field no rank is shown to consume"
    plan = CheckpointPlan(**{name: value for name, (value, _) in SEEN.items()})
    assert all(
        getattr(plan, f.name) != f.default for f in dataclasses.fields(CheckpointPlan)
        if f.name not in ("copy_cost",)
    )  # fmt: skip
    host = open_host(storage, plan)
    try:
        for name, (value, seen) in SEEN.items():
            assert seen(host) == (True if name == "keep_last_step" else value), name
    finally:
        host.close()


def test_without_tfs_snapshot_api_the_plan_saves_synchronously_and_keeps_no_copy(storage):
    plan = CheckpointPlan(dir="ckpts", async_save=True, keep_last_step=True)
    host = open_host(storage, plan, snapshots=False)
    try:
        assert host.checkpointer.async_save is False and host.checkpointer.last_step is None
    finally:
        host.close()
