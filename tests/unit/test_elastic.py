"""Elastic world sizes: the (min, max) config, the size chosen, the batch kept."""

import pytest

from raytf import ConfigError, RunConfig, ScalingConfig, Session, Trainer
from raytf.group.elastic import Resize, choose_world_size


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_workers": (3, 2)}, r"num_workers = \(3, 2\).*min <= max"),
        ({"num_workers": (0, 2)}, r"num_workers = \(0, 2\)"),
        ({"num_workers": (1, 2, 3)}, r"\(min, max\)"),
        ({"num_workers": (1.0, 2)}, r"integers"),
        ({"num_workers": (2, 3), "elastic_wait_s": -1}, r"elastic_wait_s = -1"),
        ({"global_batch_size": 0}, r"global_batch_size = 0"),
    ],
)
def test_bad_elastic_settings_name_the_field(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ScalingConfig(**kwargs)


def test_elastic_range_and_fixed_size():
    s = ScalingConfig(num_workers=[2, 4])
    assert s.is_elastic and (s.min_workers, s.max_workers) == (2, 4) and s.num_workers == (2, 4)
    fixed = ScalingConfig(num_workers=(3, 3))  # no range: a fixed group
    assert not fixed.is_elastic and fixed.num_workers == 3 == fixed.min_workers == fixed.max_workers


def test_largest_size_that_splits_the_global_batch():
    s = ScalingConfig(num_workers=(2, 4), global_batch_size=128)
    assert choose_world_size(s, 4).workers == 4
    three = choose_world_size(s, 3)  # 128 does not split over 3
    assert three.workers == 2
    assert "does not split over 3 worker(s)" in three.note and "running 2" in three.note
    assert choose_world_size(s, 9).workers == 4  # never above max
    assert choose_world_size(s, 1) is None  # below min


def test_without_a_known_batch_every_size_goes():
    s = ScalingConfig(num_workers=(1, 5))
    assert [choose_world_size(s, k).workers for k in (1, 3, 5, 7)] == [1, 3, 5, 5]


def test_gpu_replicas_count_in_the_split():
    # 2 GPUs per worker: 4 workers are 8 replicas, over which 12 does not split; 3 (6) do.
    s = ScalingConfig(
        num_workers=(1, 4), use_gpu=True, resources_per_worker={"GPU": 2}, global_batch_size=12
    )
    assert s.replicas_per_worker == 2
    assert choose_world_size(s, 4).workers == 3


def test_a_batch_that_splits_over_no_size_is_refused_at_construction():
    with pytest.raises(ConfigError, match="splits over no world size"):
        Trainer(
            lambda: None,
            scaling_config=ScalingConfig(num_workers=(2, 3), global_batch_size=7),
        )


def test_a_session_refuses_an_elastic_group(tmp_path):
    with pytest.raises(ConfigError, match="a Session keeps one group of a fixed size"):
        Session(
            lambda: None,
            lambda ctx: None,
            global_batch_size=8,
            scaling_config=ScalingConfig(num_workers=(1, 2)),
            run_config=RunConfig(storage_path=str(tmp_path)),
        )


def test_resize_record():
    r = Resize(attempt=2, before=3, after=2, reason="node lost", step=75)
    assert r.describe() == "group shrinks 3 -> 2 workers (node lost)"
    assert r.to_dict()["step"] == 75


def test_elastic_keras_needs_a_fixed_epoch_length():
    from raytf import KerasTrainer

    with pytest.raises(ConfigError, match="pass steps_per_epoch"):
        KerasTrainer(
            lambda: None,
            lambda ctx: None,
            global_batch_size=96,
            scaling_config=ScalingConfig(num_workers=(2, 3)),
        )
    trainer = KerasTrainer(
        lambda: None,
        lambda ctx: None,
        global_batch_size=96,
        steps_per_epoch=10,
        scaling_config=ScalingConfig(num_workers=(2, 3)),
    )
    assert trainer._trainer.scaling_config.global_batch_size == 96  # kept across resizes
