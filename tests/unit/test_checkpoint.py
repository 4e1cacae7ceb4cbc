"""Commit, verify, prune and pick checkpoints on a real directory (no TF needed)."""

import dataclasses
import os

import pytest

from raytf import CheckpointConfig, ConfigError
from raytf.checkpoint.commits import CheckpointCommits
from raytf.checkpoint.layout import CKPT_DIR, commit, committed, latest_intact, step_dirname
from raytf.checkpoint.retention import prune
from raytf.messages import CheckpointPart
from raytf.rundir.storage import Storage

from .checkpoint_parts import write_parts


def test_commit_then_latest(storage):
    for step in (10, 20):
        commit(storage, write_parts(storage, step), world_size=2, attempt=1)
    latest = latest_intact(storage)
    assert latest.step == 20
    assert latest.path.endswith("step_000000020")
    assert set(latest.manifest["files"]) == {
        "ckpt.index",
        "ckpt.data-00000-of-00001",
        "state_rank0.json",
        "state_rank1.json",
    }


def test_uncommitted_save_is_never_restored(storage):
    commit(storage, write_parts(storage, 10), world_size=2, attempt=1)
    write_parts(storage, 20)  # a save interrupted before the driver committed it
    assert latest_intact(storage).step == 10
    assert committed(storage) == [10]


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_damaged_newest_falls_back(storage, damage):
    for step in (10, 20):
        commit(storage, write_parts(storage, step), world_size=2, attempt=1)
    data = storage.path(CKPT_DIR, step_dirname(20), "ckpt.data-00000-of-00001")
    if damage == "truncate":
        with open(data, "r+b") as f:
            f.truncate(5)
    else:
        os.unlink(data)
    assert latest_intact(storage).step == 10


def test_commit_needs_every_rank_at_one_step(storage):
    parts = write_parts(storage, 10)
    with pytest.raises(ValueError):
        commit(storage, parts[:1], world_size=2, attempt=1)
    mixed = [parts[0], CheckpointPart(1, 11, {}, 0.0)]
    with pytest.raises(ValueError):
        commit(storage, mixed, world_size=2, attempt=1)


def test_prune_keeps_newest_and_drops_abandoned(storage):
    for step in (10, 20, 30, 40):
        commit(storage, write_parts(storage, step), world_size=2, attempt=1)
    # Step directories without a manifest, as writers left them before staging (what
    # staged parts become is tests/unit/test_staging.py's).
    write_parts(storage, 25, staged=False)  # abandoned partial save older than the newest
    write_parts(storage, 50, staged=False)  # a save possibly still in progress
    removed = prune(storage, num_to_keep=2)
    assert sorted(removed) == [10, 20, 25]
    assert committed(storage) == [30, 40]
    assert storage.exists(CKPT_DIR, step_dirname(50))


def test_coordinator_commits_when_all_ranks_report_and_forgets_dead_attempts(storage):
    coord = CheckpointCommits(storage, CheckpointConfig(num_to_keep=1), world_size=2)
    p10 = write_parts(storage, 10)
    assert coord.on_parts([p10[0]], attempt=1) == []
    assert coord.on_parts([p10[1]], attempt=1)[0].step == 10
    p20 = write_parts(storage, 20)
    coord.on_parts([p20[0]], attempt=1)
    coord.new_attempt(2)  # rank 1 died before writing its part
    assert coord.on_parts([p20[1]], attempt=2) == []  # half a checkpoint never commits
    assert coord.restore_point().step == 10


def test_a_commit_costs_the_same_storage_calls_with_200_checkpoints_kept(storage, monkeypatch):
    """A week-long run keeps every checkpoint (an interval of its own, no ``num_to_keep``):
    its 200th commit and prune must ask the store no more than its 5th (before, one lookup
    per checkpoint)."""
    config = CheckpointConfig(checkpoint_every_steps=10)
    coord = CheckpointCommits(storage, config, world_size=2)
    calls = []
    for name in ("exists", "listdir", "size", "read_json", "write_atomic", "remove"):
        real = getattr(storage, name)
        monkeypatch.setattr(storage, name, lambda *a, _r=real, _n=name: calls.append(_n) or _r(*a))
    per_commit = {}
    for k in range(1, 201):
        parts = write_parts(storage, 10 * k)
        before = len(calls)
        assert [c.step for c in coord.on_parts(parts, attempt=1)] == [10 * k]
        per_commit[k] = len(calls) - before
    assert per_commit[200] == per_commit[5] and per_commit[5] <= 12, per_commit
    assert len(coord.kept) == 200 and committed(storage)[-1] == 2000  # all kept, all there


def test_coordinator_time_trigger_fires_once_until_a_commit(storage):
    coord = CheckpointCommits(storage, CheckpointConfig(checkpoint_every_s=5), world_size=2)
    start = coord._last_save
    assert not coord.time_due(start + 1)
    assert coord.time_due(start + 6)
    assert not coord.time_due(start + 7)  # already asked, waiting for the commit


def test_file_url_storage_works_like_a_path(tmp_path):
    url_storage = Storage(f"file://{tmp_path}/run")
    commit(url_storage, write_parts(url_storage, 5), world_size=2, attempt=1)
    assert latest_intact(Storage(str(tmp_path / "run"))).step == 5


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_to_keep": 0}, "num_to_keep = 0"),
        ({"checkpoint_every_steps": 2.5}, "checkpoint_every_steps = 2.5"),
        ({"checkpoint_every_s": -1}, "checkpoint_every_s = -1"),
    ],
)
def test_bad_checkpoint_config(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        CheckpointConfig(**kwargs)


# -- the traced checkpoint writer's guard ---------------------------------------------
class _Holder:
    def __init__(self, n):
        self.variables = [object()] * n


class _Var:
    shape = ()

    def assign(self, value):
        pass


def test_variables_signature_counts_what_each_tracked_object_holds():
    from raytf.checkpoint.writer import variables_signature

    model, optimizer = _Holder(6), _Holder(2)
    tracked = {"model": model, "optimizer": optimizer, "seen": _Var()}
    before = variables_signature(tracked)
    assert before == (6, 2, 1)
    optimizer.variables = [object()] * 14  # Keras builds its slots at the first step
    assert variables_signature(tracked) != before  # so the traced save is traced again


def test_variables_signature_gives_up_on_objects_that_do_not_list_their_variables():
    from raytf.checkpoint.writer import variables_signature

    assert variables_signature({"model": _Holder(1), "iterator": object()}) is None


def _emergency(parts, digests):
    return {
        p.rank: dataclasses.replace(p, reason="emergency", digest=d) for p, d in zip(parts, digests)
    }


def test_emergency_parts_commit_only_when_the_survivors_agree_on_something_new(storage):
    """Rank 2 of 3 died: ranks 0 and 1 answered with their state at their last step."""
    coord = CheckpointCommits(storage, CheckpointConfig(), world_size=3)
    first = write_parts(storage, 20, world=3)
    coord.on_parts(first, attempt=1)
    assert coord.latest.step == 20
    survivors = write_parts(storage, 27, world=2)  # ranks 0 and 1 wrote theirs
    ckpt, why = coord.commit_emergency({0: survivors[0], 1: "no step completed"}, {2}, attempt=1)
    assert ckpt is None and "rank 1: no step completed" in why
    ckpt, why = coord.commit_emergency(_emergency(survivors, ["a", "b"]), {2}, attempt=1)
    assert ckpt is None and "disagree" in why  # same step, another state: refused
    stale = write_parts(storage, 20, world=2)
    ckpt, why = coord.commit_emergency(_emergency(stale, ["a", "a"]), {2}, attempt=1)
    assert ckpt is None and "not newer than the committed step 20" in why
    assert latest_intact(storage).step == 20
    ckpt, why = coord.commit_emergency(_emergency(survivors, ["a", "a"]), {2}, attempt=1)
    assert ckpt is not None and ckpt.step == 27 and "ranks [0, 1] at step 27" in why
    assert ckpt.manifest["missing_ranks"] == [2] and ckpt.manifest["reason"] == "emergency"
    assert latest_intact(storage).step == 27 and coord.kept == [20, 27]


def test_parts_of_a_committed_step_are_refused_with_a_line_naming_it(storage):
    said = []
    coord = CheckpointCommits(storage, CheckpointConfig(), world_size=2, say=said.append)
    assert coord.on_parts(write_parts(storage, 10), attempt=1)[0].step == 10
    assert coord.on_parts(write_parts(storage, 20), attempt=1)[0].step == 20
    assert coord.on_parts(write_parts(storage, 10), attempt=1) == []  # a label seen twice
    assert coord.on_parts(write_parts(storage, 15), attempt=1) == []  # late, never committed
    assert said == [
        "checkpoint parts of step 10 not committed: it is committed already and a "
        "committed checkpoint is never written again",
        "checkpoint parts of step 15 not committed: the newer step 20 is committed already",
    ]
    assert coord.restore_point().step == 20


def test_an_emergency_checkpoint_that_lost_a_ranks_own_statistics_is_not_committed(storage):
    """Rank 2 of 3 died holding its own BatchNormalization statistics (unsynchronized):
    committed without them, its new process would resume with rank 0's, not exact. The
    restart reads step 20 instead and redoes the steps after it."""
    coord = CheckpointCommits(storage, CheckpointConfig(), world_size=3)
    coord.on_parts(write_parts(storage, 20, world=3), attempt=1)
    survivors = {
        rank: dataclasses.replace(part, own_state=True)
        for rank, part in _emergency(write_parts(storage, 27, world=2), ["a", "a"]).items()
    }
    ckpt, why = coord.commit_emergency(survivors, {2}, attempt=1)
    assert ckpt is None and "rank(s) [2] kept their own values" in why
    assert latest_intact(storage).step == 20 and coord.kept == [20]
