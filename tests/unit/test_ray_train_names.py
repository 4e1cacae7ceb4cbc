"""Ray Train names a TF script calls, on raytf (raytf.integrations.ray_train): Ray's Keras
checkpoint object, the shard helper and the result's data frame. On real files and a
real Keras model; the scripts themselves run in tests/integration/test_ray_examples.py."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from raytf.errors import ConfigError
from raytf.integrations import ray_train
from raytf.integrations.ray_checkpoint import METADATA
from raytf.result import Result


def small_model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_a_tensorflow_checkpoint_gives_back_the_model_it_was_made_from():
    model = small_model()
    checkpoint = ray_train.TensorflowCheckpoint.from_model(model)
    assert sorted(os.listdir(checkpoint.path)) == [METADATA, "model.keras"]
    with open(os.path.join(checkpoint.path, METADATA)) as f:
        assert json.load(f) == {"_model_filename": "model.keras"}  # Ray's key and file
    loaded = checkpoint.get_model()
    x = np.arange(6, dtype="float32").reshape(2, 3)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    # Read through the plain Checkpoint as well: the metadata travels with the directory.
    again = ray_train.TensorflowCheckpoint.from_directory(checkpoint.to_directory())
    assert again.get_metadata() == checkpoint.get_metadata()


def test_what_a_tensorflow_checkpoint_cannot_do_is_said(tmp_path):
    with pytest.raises(ConfigError, match="raytf does not run Ray Data preprocessors"):
        ray_train.TensorflowCheckpoint.from_model(small_model(), preprocessor=object())
    with pytest.raises(ConfigError, match="needs an .h5 file"):
        ray_train.TensorflowCheckpoint.from_h5(str(tmp_path / "model.keras"))
    with pytest.raises(ConfigError, match="names no model"):
        ray_train.TensorflowCheckpoint.from_directory(str(tmp_path)).get_model()
    (tmp_path / METADATA).write_text("[1]")
    with pytest.raises(ConfigError, match="is not a JSON object"):
        ray_train.Checkpoint.from_directory(str(tmp_path)).get_metadata()
    (tmp_path / METADATA).write_text(json.dumps({"_model_filename": "../elsewhere.keras"}))
    with pytest.raises(ConfigError, match="outside the directory"):
        ray_train.TensorflowCheckpoint.from_directory(str(tmp_path)).get_model()


def test_a_prepared_shard_is_not_sharded_again_by_the_strategy():
    prepared = ray_train.prepare_dataset_shard(tf.data.Dataset.range(8).batch(2))
    policy = prepared.options().experimental_distribute.auto_shard_policy
    assert policy == tf.data.experimental.AutoShardPolicy.OFF
    assert [b.tolist() for b in prepared.as_numpy_iterator()] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_the_results_reports_as_a_data_frame():
    reports = [{"step": 8, "loss": 0.9}, {"step": 16, "loss": 0.5, "epoch": 1}]
    result = Result(metrics=reports[-1], metrics_history=reports, **_rest())
    frame = result.metrics_dataframe
    assert list(frame["step"]) == [8, 16] and list(frame["loss"]) == [0.9, 0.5]
    assert frame["epoch"].isna().tolist() == [True, False]


def _rest():
    import dataclasses

    names = [f.name for f in dataclasses.fields(Result)]
    return {n: None for n in names if n not in ("metrics", "metrics_history")}


def loop(config):
    return config


def test_tuner_takes_a_raytf_trainer_in_ray_trains_shape():
    from raytf.integrations.tune import loop_config

    trainer = ray_train.TensorflowTrainer(loop, train_loop_config={"lr": 0.1, "steps": 8})
    space = {"train_loop_config": {"lr": 0.01}}
    tuner = ray_train.Tuner(trainer, param_space=space)
    assert isinstance(tuner, __import__("ray").tune.Tuner)
    # A trial's config in Ray's shape adds what it nests; a flat one, itself.
    assert loop_config({"train_loop_config": {"lr": 0.01}}) == {"lr": 0.01}
    assert loop_config({"lr": 0.01}) == {"lr": 0.01}
    with pytest.raises(ConfigError, match=r"\['scaling_config'\] cannot be searched over"):
        ray_train.Tuner(trainer, param_space={**space, "scaling_config": {}})


def test_resume_from_checkpoint_is_the_runs_first_checkpoint_unless_it_has_one(tmp_path):
    source = tmp_path / "given"
    source.mkdir()
    (source / "weights.txt").write_text("epoch 3")
    config = ray_train.RunConfig(name="moved", storage_path=str(tmp_path / "runs"))
    given = ray_train.Checkpoint.from_directory(str(source))
    ray_train._seed(config.run_dir, given)
    first = ray_train.latest_checkpoint(config.run_dir)
    with first.as_directory() as d:
        assert open(os.path.join(d, "weights.txt")).read() == "epoch 3"
    (source / "weights.txt").write_text("changed")
    ray_train._seed(config.run_dir, given)  # the run has one now: left as it is
    with ray_train.latest_checkpoint(config.run_dir).as_directory() as d:
        assert open(os.path.join(d, "weights.txt")).read() == "epoch 3"


def test_ray_trainers_arguments_for_what_raytf_does_itself_are_refused_with_why():
    with pytest.raises(ConfigError, match="dataset_config=...\\) is not supported: raytf splits"):
        ray_train.TensorflowTrainer(loop, dataset_config=object())
    with pytest.raises(ConfigError, match="must be a Checkpoint"):
        ray_train.TensorflowTrainer(loop, resume_from_checkpoint="/some/path")
    trainer = ray_train.TensorflowTrainer(loop, tensorflow_config=None, train_loop_config={"a": 1})
    assert trainer.train_loop_config == {"a": 1}


class _Shard:
    """raytf's shard, as far as the Ray view uses it: what it was asked for."""

    iterator = type("RayIterator", (), {"iter_rows": lambda self: iter([{"x": 1}])})()

    def batches(self, columns, rows, **options):
        self.asked = (columns, rows, options)
        return "dataset"


def test_rays_to_tf_batch_size_is_rows_per_worker_and_other_methods_are_rays():
    from raytf.integrations.ray_data_iterator import RayDataIterator

    shard = _Shard()
    view = RayDataIterator(shard)
    assert view.to_tf(feature_columns="x", label_columns="y", batch_size=32) == "dataset"
    columns, rows, options = shard.asked
    assert columns == ("x", "y", None) and rows == 32 and options["drop_last"] is False
    assert list(view.iter_rows()) == [{"x": 1}]  # Ray's own DataIterator answers
    with pytest.raises(ConfigError, match="reads the types from the dataset's schema"):
        view.to_tf("x", "y", batch_size=4, feature_type_spec=tf.TensorSpec([None]))
    with pytest.raises(ConfigError, match="at least 1 row per worker"):
        view.to_tf("x", "y", batch_size=0)
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['batch'\\]"):
        view.to_tf("x", "y", batch=4)


@pytest.fixture(params=["local", "memory"])
def checkpoint_root(request, tmp_path):
    """Where reported checkpoints live: a directory, or an object store (fsspec's memory)."""
    import uuid

    from raytf.rundir.storage import Storage

    if request.param == "local":
        yield str(tmp_path / "store")
        return
    url = f"memory://bucket/ckpt-{uuid.uuid4().hex}"
    yield url
    Storage(url).remove()


def test_a_saved_model_checkpoint_round_trips_with_its_subdirectories(tmp_path, checkpoint_root):
    """``from_saved_model`` puts ``variables/`` and ``assets/`` under the directory: stored
    (as ``report`` and the seed store it), read back, and loaded, they come back whole."""
    from raytf.rundir.storage import Storage

    model = small_model()
    model.export(str(tmp_path / "exported"), verbose=False)
    made = ray_train.TensorflowCheckpoint.from_saved_model(str(tmp_path / "exported"))
    Storage(checkpoint_root).upload_tree(made.path, "c")
    stored = ray_train.TensorflowCheckpoint(Storage(checkpoint_root).url("c"))
    copy = stored.to_directory(str(tmp_path / "copy"))
    assert sorted(os.listdir(os.path.join(copy, "variables")))  # not empty, not missing
    for root, _, names in os.walk(made.path):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), made.path)
            with open(os.path.join(root, name), "rb") as f:
                original = f.read()
            with open(os.path.join(copy, rel), "rb") as f:
                assert f.read() == original, rel
    x = np.arange(6, dtype="float32").reshape(2, 3)
    loaded = stored.get_model()  # through as_directory; held: its functions need it
    served = loaded.serve(x).numpy()
    np.testing.assert_allclose(served, model.predict(x, verbose=0), rtol=1e-6)


def test_a_reported_checkpoint_never_takes_a_name_that_exists():
    assert ray_train.next_name([]) == "checkpoint_000000"
    names = ["checkpoint_000000", "checkpoint_000002", "latest.txt", "checkpoint_x"]
    assert ray_train.next_name(names) == "checkpoint_000003"  # 000001 went: a count collides


def test_every_rank_of_an_attempt_starts_from_the_same_checkpoint_however_late_it_asks(
    tmp_path,
):
    """Rank 0 may report before rank 1's loop asks for its checkpoint: rank 1 still gets
    what the attempt started from (a newer one would make the ranks load different
    states); the next attempt starts, on every rank, from the newest reported."""
    from raytf.worker import context as contexts

    run_dir = str(tmp_path / "run")
    reported = tmp_path / "reported"
    reported.mkdir()

    def as_rank(rank: int, attempt: int):
        contexts._set_context(
            contexts.TrainContext(
                strategy=None,
                rank=rank,
                world_size=2,
                local_rank=rank,
                node_ip="127.0.0.1",
                config={},
                run_dir=run_dir,
                buffer=contexts._ReportBuffer(),
                attempt=attempt,
            )
        )

    def seen() -> str | None:
        checkpoint = ray_train.get_checkpoint()
        return None if checkpoint is None else os.path.basename(checkpoint.path)

    def report(text: str) -> None:
        (reported / "epoch.txt").write_text(text)
        ray_train.report({"step": 1}, checkpoint=ray_train.Checkpoint(str(reported)))

    try:
        as_rank(0, 1)
        assert seen() is None
        report("attempt 1")
        assert seen() == "checkpoint_000000"  # rank 0: the latest it reported
        as_rank(1, 1)
        assert seen() is None  # the attempt started from nothing
        as_rank(1, 2)
        assert seen() == "checkpoint_000000"
        as_rank(0, 2)
        report("attempt 2")
        report("attempt 2, later")
        assert seen() == "checkpoint_000002"
        as_rank(1, 2)
        assert seen() == "checkpoint_000000"
        as_rank(1, 3)
        with ray_train.get_checkpoint().as_directory() as d:
            assert open(os.path.join(d, "epoch.txt")).read() == "attempt 2, later"
    finally:
        contexts._set_context(None)
