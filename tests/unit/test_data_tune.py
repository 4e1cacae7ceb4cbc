"""Ray Data and Tune glue that needs no cluster: dataset checks, the shard lockstep check,
batch arithmetic, the trial's reservation."""

from types import SimpleNamespace

import pytest

from raytf.config import ScalingConfig
from raytf.data.feed import ShardCheck, check_datasets, check_room, plan_rows
from raytf.data.shard import DataShard
from raytf.errors import ConfigError, DataShardError
from raytf.messages import ShardEpoch

pytestmark = pytest.mark.unit


def ended(rank, batches, epoch=0, name="train"):
    return ShardEpoch(rank, name, epoch, batches, batches * 64, 64)


def test_equal_epochs_pass_and_are_forgotten():
    check = ShardCheck(2)
    assert check.add(0, [ended(0, 8)], {"train": (1, 0)}) is None
    assert check.add(1, [ended(1, 8)], {"train": (1, 2)}) is None
    assert check.ended == {}


def test_ranks_ending_an_epoch_with_different_counts_are_uneven():
    check = ShardCheck(2)
    assert check.add(0, [ended(0, 8)], {}) is None
    err = check.add(1, [ended(1, 7)], {})
    assert isinstance(err, DataShardError)
    assert "rank 0's shard ended after 8 batches of 64 rows while rank 1's gave 7" in str(err)


def test_a_rank_reading_past_anothers_epoch_end_is_uneven_before_it_ends():
    check = ShardCheck(2)
    assert check.add(1, [], {"train": (0, 5)}) is None
    err = check.add(0, [ended(0, 4)], {"train": (1, 0)})
    assert err is not None and "rank 1's gave 5" in str(err)


def test_an_empty_epoch_is_an_error_naming_the_batch():
    err = ShardCheck(2).add(0, [ended(0, 0)], {})
    assert "gave no full batch of 64 rows in epoch 0" in str(err)


def test_plan_rows_refuses_no_step_and_says_what_is_dropped():
    with pytest.raises(DataShardError, match="fewer than one global batch of 128"):
        plan_rows("train", 100, 2, 128)
    with pytest.raises(DataShardError, match="fewer than the 4 workers"):
        plan_rows("train", 3, 4, None)
    assert plan_rows("train", 1000, 2, 128) == (
        "dataset 'train': 1000 rows, 7 steps of 128 per epoch, "
        "104 rows dropped per epoch (full batches only)"
    )
    assert (
        plan_rows("train", 1024, 2, 128) == "dataset 'train': 1024 rows, 8 steps of 128 per epoch"
    )
    assert plan_rows("train", 1001, 2, None) == "dataset 'train': 1001 rows, 1 dropped per epoch"


def test_ray_data_needs_a_cpu_the_workers_do_not_hold():
    check_room(["train"], 2.0, 4.0)
    with pytest.raises(ConfigError, match="hold 2 of the cluster's 2 CPUs"):
        check_room(["train"], 2.0, 2.0)


def test_datasets_argument_is_checked():
    assert check_datasets(None) == {}
    with pytest.raises(ConfigError, match="must be a dict"):
        check_datasets([1])
    with pytest.raises(ConfigError, match=r"datasets\['x'\] is a list"):
        check_datasets({"x": []})


def test_per_replica_batch_must_divide():
    shard = DataShard("train", None, rank=0, num_replicas=4, on_epoch=print, position={})
    assert shard.per_replica_batch(128) == 32
    split = "dataset 'train': global_batch_size = 130 does not divide over 4 replicas.*128 or 132"
    with pytest.raises(ConfigError, match=split):
        shard.per_replica_batch(130)


def test_trial_reserves_an_empty_driver_bundle_and_one_per_worker():
    from raytf.integrations.tune import trial_resources

    pgf = trial_resources(ScalingConfig(num_workers=3, resources_per_worker={"CPU": 2}))
    assert pgf.bundles == [{}, {"CPU": 2.0}, {"CPU": 2.0}, {"CPU": 2.0}] or (
        pgf.head_bundle_is_empty and pgf.bundles == [{"CPU": 2.0}] * 3
    )
    with pytest.raises(ConfigError, match="fixed reservation"):
        trial_resources(ScalingConfig(num_workers=(1, 2)))
    # With datasets, one more CPU after the workers' for Ray Data's tasks.
    data = trial_resources(ScalingConfig(num_workers=2), with_data=True)
    assert data.bundles[-1] == {"CPU": 1.0} and len(data.bundles) in (3, 4)


def test_trial_slots_refuse_a_reservation_of_another_shape(monkeypatch):
    from raytf.group import slots as slots_mod
    from raytf.group.slots import FixedSlots, TrialSlots

    removed = []
    monkeypatch.setattr(slots_mod, "remove_placement_group", removed.append)
    pg = SimpleNamespace(bundle_specs=[{"CPU": 1.0}])
    with pytest.raises(ConfigError, match="not 2 x"):
        TrialSlots(ScalingConfig(num_workers=2), pg)
    slots = TrialSlots(ScalingConfig(num_workers=1), pg)
    assert slots.evict({"n"}) == []
    slots.close()
    assert removed == []  # Tune owns the trial's reservation: raytf never removes it
    own = FixedSlots(ScalingConfig(num_workers=1), "run")
    own.pg = pg
    own.close()
    assert removed == [pg]  # a run's own reservation goes when the run ends
    with_data = SimpleNamespace(bundle_specs=[{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}])
    assert TrialSlots(ScalingConfig(num_workers=2), with_data).n == 2


def test_a_trial_checkpoint_round_trips_through_tune_into_a_new_run_dir(tmp_path):
    """save_checkpoint hands Tune the committed step directory; a restored trial puts it
    where raytf looks, so its driver resumes from it (here: another run directory)."""
    from raytf.checkpoint.layout import commit, latest_intact
    from raytf.config import RunConfig
    from raytf.driver.launch import RunSpec
    from raytf.integrations.tune import trainable
    from raytf.rundir.storage import Storage

    from .checkpoint_parts import write_parts

    old_run = RunConfig(name="old", storage_path=str(tmp_path / "runs"))
    old = Storage(old_run.run_dir)
    ckpt = commit(old, write_parts(old, 64), world_size=2, attempt=1)
    cls = trainable(RunSpec(fn=print, config={}, scaling=ScalingConfig(), run_config=old_run))
    trial = SimpleNamespace(
        _controller=SimpleNamespace(ckpts=SimpleNamespace(latest=ckpt)),
        _saved_step=None,
        _run_config=old_run,
    )
    tune_dir = tmp_path / "tune_ckpt"
    tune_dir.mkdir()
    assert cls.save_checkpoint(trial, str(tune_dir)) == str(tune_dir)
    assert trial._saved_step == 64

    new = RunConfig(name="new", storage_path=str(tmp_path / "runs"))
    restored = SimpleNamespace(_restore_from=None, _run_config=new)
    cls.load_checkpoint(restored, str(tune_dir))
    cls._seed_checkpoint(restored)
    found = latest_intact(Storage(new.run_dir))
    assert found is not None and found.step == 64


def test_checkpoint_step_reads_the_raytf_step_a_tune_checkpoint_holds(tmp_path):
    from raytf.integrations.tune import checkpoint_step

    assert checkpoint_step(None) is None
    assert checkpoint_step(str(tmp_path)) is None  # what Tune saves for an early stop
    (tmp_path / "step_000000128").mkdir()
    assert checkpoint_step(SimpleNamespace(path=str(tmp_path))) == 128
