"""A restore tells damage, another model and a failing store apart (in-process, real TF).

Only damage may make the driver mark a checkpoint bad; a model that does not fit
stops the run with the variables named and every file left as it was; a store
that fails is retried, then an infrastructure failure.
"""

import hashlib
import json
import os
import types

import keras
import numpy as np
import pytest

from raytf.checkpoint import structure
from raytf.checkpoint.layout import CKPT_DIR, MANIFEST, commit, latest_intact, step_dirname
from raytf.config import FailureConfig
from raytf.driver.failure_policy import Decision, Failure, FailureKind, FailurePolicy, classify
from raytf.errors import CheckpointMismatchError, CheckpointRestoreError, CheckpointStorageError
from raytf.rundir import storage as storage_module
from tests.unit.test_worker_checkpointer import checkpointer, make_model, values


def model_of(width: int):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(width), keras.layers.Dense(2)])
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    return model, optimizer


def run_dir_bytes(storage) -> dict[str, str]:
    out = {}
    for root, _, files in os.walk(storage.root):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, storage.root)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture
def saved(storage, parts):
    """A run that committed step 5 of a Dense(8) model."""
    model, optimizer = model_of(8)
    ck = checkpointer(storage, parts)
    ck.track({"model": model, "optimizer": optimizer})
    ck.save_now(5, "session")
    commit(storage, parts, world_size=1, attempt=1)
    return latest_intact(storage).path, values(model.weights)


def test_a_changed_model_is_refused_naming_the_variables_and_nothing_is_touched(storage, saved):
    url, _ = saved
    before = run_dir_bytes(storage)
    assert any(k.startswith("model/") for k in before)  # the architecture the run exports with
    model, optimizer = model_of(3)  # Dense(8) -> Dense(3)
    with pytest.raises(CheckpointMismatchError) as info:
        checkpointer(storage, [], restore_url=url).track({"model": model, "optimizer": optimizer})
    err = info.value
    assert err.step == 5 and err.run_dir == storage.url()
    # Keras numbers layer names per process: the shapes are what is compared and shown.
    assert [d.split(": ", 1)[1] for d in err.differences] == [
        "this model (4, 3), the checkpoint (4, 8)",
        "this model (3,), the checkpoint (8,)",
        "this model (3, 2), the checkpoint (8, 2)",
    ]
    assert err.differences[0].endswith("kernel: this model (4, 3), the checkpoint (4, 8)")
    assert "(4, 3)" in str(err) and "(4, 8)" in str(err) and "start_fresh=True" in str(err)
    assert run_dir_bytes(storage) == before  # no file changed, the architecture included
    assert classify(err) is FailureKind.MISMATCH
    failure = Failure(FailureKind.MISMATCH, err, 1)
    assert FailurePolicy(FailureConfig(max_failures=-1)).decide(failure, 1) is Decision.RAISE


def test_a_checkpoint_without_the_record_is_judged_from_tensorflows_refusal(storage, saved):
    url, _ = saved
    manifest = storage.read_json(CKPT_DIR, step_dirname(5), MANIFEST)
    del manifest["structure"]  # as checkpoints written before the record existed
    storage.write_json_atomic(manifest, CKPT_DIR, step_dirname(5), MANIFEST)
    model, optimizer = model_of(3)
    with pytest.raises(CheckpointMismatchError) as info:
        checkpointer(storage, [], restore_url=url).track({"model": model, "optimizer": optimizer})
    assert "Received incompatible tensor" in info.value.differences[0]


def test_the_same_model_restores_and_a_truncated_data_file_is_damage(storage, saved):
    url, weights = saved
    model, optimizer = model_of(8)
    assert checkpointer(storage, [], restore_url=url).track({"model": model}) == 5
    assert all(np.array_equal(a, b) for a, b in zip(values(model.weights), weights))
    data = next(n for n in os.listdir(url) if n.startswith("ckpt.data"))
    with open(os.path.join(url, data), "r+b") as f:
        f.truncate(16)
    fresh, _ = model_of(8)
    with pytest.raises(CheckpointRestoreError):
        checkpointer(storage, [], restore_url=url).track({"model": fresh})


def test_a_store_that_fails_is_retried_then_an_infrastructure_failure(storage, saved, monkeypatch):
    url, _ = saved
    monkeypatch.setattr(storage_module, "time", types.SimpleNamespace(sleep=lambda s: None))
    real = storage_module.Storage.read_json
    fails = {"left": 2}

    def flaky(self, *parts):
        if fails["left"]:
            fails["left"] -= 1
            raise ConnectionResetError("connection reset by peer")
        return real(self, *parts)

    monkeypatch.setattr(storage_module.Storage, "read_json", flaky)
    model, _ = model_of(8)
    assert checkpointer(storage, [], restore_url=url).track({"model": model}) == 5  # retried
    fails["left"] = 100
    with pytest.raises(CheckpointStorageError) as info:
        checkpointer(storage, [], restore_url=url).track({"model": model_of(8)[0]})
    assert "ConnectionResetError" in str(info.value)
    assert classify(info.value) is FailureKind.STORAGE and FailureKind.STORAGE.counts


def test_nan_weights_are_flagged_in_the_chiefs_part(storage, parts):
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts)
    ck.refuse_nonfinite = True
    ck.track({"model": model, "optimizer": optimizer})
    ck.save_now(1, "session")
    kernel = model.weights[0]
    kernel.assign(np.full(kernel.shape, np.nan, dtype=np.float32))
    ck.save_now(2, "session")
    assert [(p.step, p.finite) for p in parts] == [(1, True), (2, False)]
    assert [shape for _, shape in parts[0].structure["model"]] == [[4, 2], [2]]


def test_differences_compare_positions_not_names():
    saved = {"model": [["a/dense/kernel", [4, 8]], ["a/dense/bias", [8]]]}
    renamed = {"model": [["b/dense_7/kernel", [4, 8]], ["b/dense_7/bias", [8]]]}
    assert structure.differences(saved, renamed) == []
    grown = {"model": [*renamed["model"], ["b/extra/kernel", [8, 1]]]}
    assert structure.differences(saved, grown) == [
        "b/extra/kernel: this model (8, 1), the checkpoint absent"
    ]
    added = structure.differences(saved, {"ema": []})
    assert added == ["ema: in this model, not in the checkpoint"]
    assert json.loads(json.dumps(saved)) == saved  # what the manifest holds round-trips


def test_an_emergency_part_never_writes_into_a_committed_checkpoint(storage, parts):
    """Rank 0 died right after the commit of step 2: the survivor's last step is 2 too.
    It must refuse before writing (it once wrote its TF files into the committed step's
    directory, which the driver then refused to commit: a committed checkpoint altered)."""
    from raytf.checkpoint.emergency import LastStep, emergency_part

    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts, rank=1, world_size=2)
    ck.last_step = LastStep()  # what keep_last_step=True makes
    ck.track({"model": model, "optimizer": optimizer})
    ck.step_end(2)
    before = run_dir_bytes(storage)
    why = emergency_part(ck, write_tf=True, committed=2)
    assert why == "step 2 is not newer than the committed step 2"
    assert run_dir_bytes(storage) == before
    part = emergency_part(ck, write_tf=True, committed=1)
    assert part.step == 2 and "ckpt.index" in part.files
