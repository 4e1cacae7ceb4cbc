import pytest

from raytf import ConfigError, RunConfig, ScalingConfig, Trainer


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_workers": -2}, r"num_workers = -2"),
        ({"num_workers": (0, 2)}, r"num_workers = \(0, 2\)"),
        ({"num_workers": 1.5}, r"num_workers = 1.5"),
        ({"num_workers": True}, r"num_workers = True"),
        ({"use_gpu": "yes"}, r"use_gpu = 'yes'"),
        ({"placement_strategy": "spread"}, r"placement_strategy = 'spread'"),
        ({"resources_per_worker": {"CPU": -1}}, r"resources_per_worker\['CPU'\] = -1"),
        ({"resources_per_worker": {"CPU": "2"}}, r"resources_per_worker\['CPU'\] = '2'"),
        ({"resources_per_worker": {"CPU": float("inf")}}, r"finite"),
        ({"resources_per_worker": {"": 1}}, r"resource name ''"),
        ({"resources_per_worker": [("CPU", 1)]}, r"must be a dict"),
        ({"resources_per_worker": {"GPU": 1.5}, "use_gpu": True}, r"whole number"),
        ({"resources_per_worker": {"GPU": 1}}, r"use_gpu=False"),
        ({"resources_per_worker": {"GPU": 0}, "use_gpu": True}, r"use_gpu=True"),
    ],
)
def test_bad_scaling_names_field_and_value(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ScalingConfig(**kwargs)


def test_zero_workers_is_local_mode_which_sessions_and_trials_refuse():
    local = ScalingConfig(num_workers=0)
    assert local.is_local and not ScalingConfig(num_workers=1).is_local
    with pytest.raises(ConfigError, match=r"num_workers = 0 \(local mode\): a Session needs"):
        local.require_fixed_size("a Session", "keeps one group")


def test_worker_resources_defaults():
    assert ScalingConfig(num_workers=2).worker_resources() == {"CPU": 1.0}
    assert ScalingConfig(use_gpu=True).worker_resources() == {"CPU": 1.0, "GPU": 1.0}
    gpu4 = ScalingConfig(use_gpu=True, resources_per_worker={"GPU": 4, "CPU": 8, "pool_a": 1})
    assert gpu4.worker_resources() == {"CPU": 8.0, "GPU": 4.0, "pool_a": 1.0}
    assert gpu4.gpus_per_worker == 4
    assert ScalingConfig(resources_per_worker={"CPU": 0}).worker_resources() == {}


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"name": "a/b"}, r"name = 'a/b'"),
        ({"name": ""}, r"name = ''"),
        ({"verbose": 3}, r"verbose = 3"),
        ({"setup_timeout_s": 0}, r"setup_timeout_s = 0"),
        ({"placement_timeout_s": -1}, r"placement_timeout_s = -1"),
        ({"progress_interval_s": "1"}, r"progress_interval_s = '1'"),
    ],
)
def test_bad_run_config(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        RunConfig(**kwargs)


def test_run_dir_is_storage_over_name(tmp_path):
    rc = RunConfig(name="exp1", storage_path=str(tmp_path))
    assert rc.run_dir == str(tmp_path / "exp1")
    assert RunConfig().name.startswith("raytf_")


def test_default_run_names_differ_within_one_second():
    """Seen: two trainers started in one second shared a directory (the second could
    resume from the first's checkpoints). A name given explicitly still resumes."""
    names = {RunConfig().name for _ in range(50)}
    assert len(names) == 50
    assert RunConfig(name="again").name == "again"


def test_trainer_checks_its_arguments():
    with pytest.raises(ConfigError, match="must be a function"):
        Trainer(42)
    with pytest.raises(ConfigError, match="train_loop_config"):
        Trainer(lambda: None, train_loop_config=[1])
    with pytest.raises(ConfigError, match="scaling_config"):
        Trainer(lambda: None, scaling_config={"num_workers": 2})


@pytest.mark.parametrize(
    "name, raw, why",
    [
        ("RAYTF_KEEP_IDLE_S", "-5", "must be a number >= 0, finite"),
        ("RAYTF_POLL_INTERVAL_S", "nan", "must be a number >= 0, finite"),
        ("RAYTF_LEASE_STALE_S", "inf", "must be a number >= 0, finite"),
        ("RAYTF_KEEP_PROCESSES", "two", "must be an integer"),
        ("RAYTF_MAX_PORT_RETRIES", "-1", "must be an integer >= 0"),
    ],
)
def test_a_bad_raytf_variable_is_refused_naming_it(name, raw, why):
    from raytf.settings import Settings

    with pytest.raises(ConfigError, match=f"{name}='{raw}': {why}"):
        Settings.from_env({name: raw})
    assert Settings.from_env({name: "7"}) != Settings()  # a good one is taken
