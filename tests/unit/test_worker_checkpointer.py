"""A worker's checkpointer in-process: one CPU, TF's default strategy, a tiny Keras model.

The on-demand path (``request`` on the chief, then ``step_end``) publishes the
agreed step in TF's coordination-service key-value store, which exists only
under MultiWorkerMirroredStrategy; here it is tested from the agreed target on.
"""

import json
import os
import random
import uuid

import keras
import numpy as np
import pytest
import tensorflow as tf

from raytf.checkpoint.checkpointer import WorkerCheckpointer
from raytf.checkpoint.layout import (
    CKPT_DIR,
    commit,
    latest_intact,
    staged_dir,
    staged_steps,
    step_dirname,
)
from raytf.errors import CheckpointRestoreError
from raytf.rundir.storage import Storage


def make_model(seed: int):
    """A small model with weights drawn from ``seed``, and an Adam built on them."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    rs = np.random.RandomState(seed)
    model.set_weights([rs.standard_normal(w.shape).astype(np.float32) for w in model.weights])
    optimizer = keras.optimizers.Adam(learning_rate=0.1)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def train_step(model, optimizer, scale: float = 1.0) -> None:
    """Moves the weights and the optimizer's slots and iteration count."""
    grads = [tf.ones_like(v) * scale for v in model.trainable_variables]
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


def values(variables) -> list[np.ndarray]:
    return [np.array(v.numpy() if hasattr(v, "numpy") else v) for v in variables]


def all_equal(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def staged(storage, part) -> tuple[str, ...]:
    """Where a part waits for its commit (a folder of its own)."""
    return (CKPT_DIR, *staged_dir(storage, part.step, part.staged))


def checkpointer(
    storage,
    parts,
    *,
    every_steps=None,
    restore_url=None,
    rank=0,
    world_size=1,
    async_save=False,
    **extra,
):
    return WorkerCheckpointer(
        storage=storage,
        ckpt_dir=CKPT_DIR,
        rank=rank,
        world_size=world_size,
        strategy=tf.distribute.get_strategy(),
        every_steps=every_steps,
        restore_url=restore_url,
        on_part=parts.append,
        async_save=async_save,
        **extra,
    )


# -- saving ----------------------------------------------------------------------------------
def test_track_without_restore_starts_at_zero(storage, parts):
    early = checkpointer(storage, parts, every_steps=5)
    early.step_end(5)  # before track(): nothing to save yet
    with pytest.raises(RuntimeError):
        early.save_now(5, "session")

    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts, every_steps=5)
    assert ck.track({"model": model, "optimizer": optimizer}) == 0
    assert parts == []
    assert storage.listdir(CKPT_DIR) == []
    with pytest.raises(RuntimeError):
        ck.track({"model": model})


def test_every_steps_saves_on_multiples_only(storage, parts):
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts, every_steps=5)
    ck.track({"model": model, "optimizer": optimizer})
    for step in range(1, 11):
        ck.step_end(step)
        assert [p.step for p in parts] == [s for s in (5, 10) if s <= step]
    assert [(p.rank, p.reason) for p in parts] == [(0, "interval"), (0, "interval")]
    assert staged_steps(storage) == [5, 10] and storage.listdir(CKPT_DIR) == [".staging"]


def test_several_steps_per_call_save_when_they_cross_a_multiple(storage, parts):
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts, every_steps=5)
    ck.track({"model": model, "optimizer": optimizer})
    for step in (3, 7, 9, 10, 12, 16, 19):
        ck.step_end(step)
    assert [p.step for p in parts] == [7, 10, 16]
    assert staged_steps(storage) == [7, 10, 16]


def test_part_lists_the_tf_files_with_their_true_sizes(storage, parts):
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts, every_steps=5)
    ck.add_state("metric", lambda: {"count": 4}, lambda v: None)
    ck.track({"model": model, "optimizer": optimizer})
    for step in range(1, 6):
        ck.step_end(step)
    (part,) = parts
    d = storage.path(*staged(storage, part))
    on_disk = {n: os.path.getsize(os.path.join(d, n)) for n in os.listdir(d)}
    assert part.files == on_disk
    assert "ckpt.index" in part.files
    assert any(n.startswith("ckpt.data-") for n in part.files)
    assert "state_rank0.json" in part.files
    assert all(size > 0 for size in part.files.values())
    assert part.seconds >= 0

    with open(os.path.join(d, "state_rank0.json")) as f:
        doc = json.load(f)
    assert set(doc) == {"python", "numpy", "extra"}
    assert doc["extra"] == {"metric": {"count": 4}}
    reader = tf.train.load_checkpoint(os.path.join(d, "ckpt"))
    assert reader.get_tensor("raytf_step/.ATTRIBUTES/VARIABLE_VALUE") == 5


def test_non_chief_reports_only_its_state_file(storage, parts):
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts, every_steps=2, rank=1, world_size=2)
    ck.track({"model": model, "optimizer": optimizer})
    ck.request("time")  # only the chief acts on a request: no key-value store is touched here
    ck.step_end(2)
    (part,) = parts
    assert (part.rank, part.step, part.reason) == (1, 2, "interval")
    assert list(part.files) == ["state_rank1.json"]
    assert storage.listdir(*staged(storage, part)) == ["state_rank1.json"]


def test_agreed_target_saves_at_the_first_boundary_at_or_after_it(storage, parts):
    # What agree_on_next_step (chief) or the watcher thread (other ranks) sets once
    # the key-value store round is done.
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts)
    ck.track({"model": model, "optimizer": optimizer})
    ck.schedule._target = (7, "time")
    ck.step_end(5)
    ck.step_end(6)
    assert parts == []
    ck.step_end(8)  # a multi-step call jumping over the target still saves, once
    ck.step_end(9)
    assert [(p.step, p.reason) for p in parts] == [(8, "time")]


def test_an_agreed_target_on_an_interval_step_saves_once_with_its_reason(storage, parts):
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts, every_steps=5)
    ck.track({"model": model, "optimizer": optimizer})
    ck.schedule._target = (5, "termination")
    for step in range(1, 11):
        ck.step_end(step)
    assert [(p.step, p.reason) for p in parts] == [(5, "termination"), (10, "interval")]


def test_a_termination_request_outranks_a_timer_request(storage, parts):
    ck = checkpointer(storage, parts)
    ck.request("time")
    ck.request("termination")
    ck.request("time")
    assert ck.schedule._pending == "termination"


def test_save_now_writes_a_session_part_at_once(storage, parts):
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts, every_steps=5)
    ck.track({"model": model, "optimizer": optimizer})
    ck.save_now(3, "session")
    assert [(p.step, p.reason) for p in parts] == [(3, "session")]
    assert "ckpt.index" in storage.listdir(*staged(storage, parts[0]))
    ck.step_end(4)
    ck.step_end(5)  # the interval still counts from the session save's step
    assert [(p.step, p.reason) for p in parts] == [(3, "session"), (5, "interval")]


# -- restoring ---------------------------------------------------------------------------------
def test_restore_gives_back_step_weights_optimizer_and_rng(storage, parts):
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts, every_steps=5)
    ck.track({"model": model, "optimizer": optimizer})
    train_step(model, optimizer)
    for step in range(1, 6):
        ck.step_end(step)
    weights_5 = values(model.weights)
    train_step(model, optimizer, scale=-3.0)
    train_step(model, optimizer, scale=2.0)
    for step in range(6, 11):
        ck.step_end(step)
    py_after_save, np_after_save = random.getstate(), np.random.get_state()
    draws = (random.random(), float(np.random.random()))
    weights_10, slots_10 = values(model.weights), values(optimizer.variables)
    assert not all_equal(weights_5, weights_10)  # the two saves hold different values
    for step in (5, 10):
        commit(storage, [p for p in parts if p.step == step], world_size=1, attempt=1)
    latest = latest_intact(storage)
    assert latest.step == 10

    random.seed(12345)
    np.random.seed(54321)
    fresh, fresh_opt = make_model(1)
    assert not all_equal(values(fresh.weights), weights_10)
    assert not all_equal(values(fresh_opt.variables), slots_10)
    again = checkpointer(storage, [], every_steps=5, restore_url=latest.path)
    assert again.track({"model": fresh, "optimizer": fresh_opt}) == 10
    assert all_equal(values(fresh.weights), weights_10)
    assert all_equal(values(fresh_opt.variables), slots_10)
    assert int(fresh_opt.iterations.numpy()) == 3
    assert random.getstate() == py_after_save
    restored_np = np.random.get_state()
    assert restored_np[0] == np_after_save[0]
    assert np.array_equal(restored_np[1], np_after_save[1])
    assert restored_np[2:] == np_after_save[2:]
    assert (random.random(), float(np.random.random())) == draws

    # The older checkpoint holds its own values (the traced save reads them at run time).
    older, _ = make_model(2)
    url_5 = storage.url(CKPT_DIR, step_dirname(5))
    assert checkpointer(storage, [], restore_url=url_5).track({"model": older}) == 5
    assert all_equal(values(older.weights), weights_5)


def test_intervals_continue_from_the_restored_step(storage, parts):
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts, every_steps=4)
    ck.track({"model": model, "optimizer": optimizer})
    ck.save_now(6, "session")
    commit(storage, parts, world_size=1, attempt=1)
    resumed_parts = []
    fresh, fresh_opt = make_model(1)
    again = checkpointer(
        storage, resumed_parts, every_steps=4, restore_url=latest_intact(storage).path
    )
    assert again.track({"model": fresh, "optimizer": fresh_opt}) == 6
    for step in (7, 9):  # 6 -> 7 crosses nothing, 7 -> 9 crosses 8
        again.step_end(step)
    assert [p.step for p in resumed_parts] == [9]


def test_add_state_round_trips_what_it_held_at_the_save(storage, parts):
    state = {"count": 3, "sums": [1.5, 2.0], "name": "acc"}
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts)
    ck.add_state("metric", lambda: json.loads(json.dumps(state)), lambda v: None)
    ck.add_state("only_saved", lambda: 17, lambda v: None)
    ck.track({"model": model, "optimizer": optimizer})
    ck.save_now(4, "session")
    state["count"] = 99  # changed after the save: the restore must not see it
    state["sums"].append(7.0)
    commit(storage, parts, world_size=1, attempt=1)

    got: dict[str, list] = {"metric": [], "only_restored": []}
    fresh, fresh_opt = make_model(1)
    again = checkpointer(storage, [], restore_url=latest_intact(storage).path)
    again.add_state("metric", lambda: None, got["metric"].append)
    again.add_state("only_restored", lambda: None, got["only_restored"].append)
    again.track({"model": fresh, "optimizer": fresh_opt})
    assert got == {"metric": [{"count": 3, "sums": [1.5, 2.0], "name": "acc"}], "only_restored": []}
    with pytest.raises(RuntimeError):
        again.add_state("late", lambda: None, lambda v: None)


def test_a_rank_new_since_a_resize_takes_the_chiefs_state_and_keeps_its_rng(storage, parts):
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts)
    ck.add_state("metric", lambda: {"count": 5}, lambda v: None)
    ck.track({"model": model, "optimizer": optimizer})
    ck.save_now(2, "session")
    weights = values(model.weights)
    commit(storage, parts, world_size=1, attempt=1)

    got = []
    fresh, fresh_opt = make_model(1)  # building a Keras model draws from Python's RNG
    newcomer = checkpointer(
        storage, [], rank=1, world_size=2, restore_url=latest_intact(storage).path
    )
    newcomer.add_state("metric", lambda: None, got.append)
    random.seed(7)
    expected = random.Random(7).random()
    assert newcomer.track({"model": fresh, "optimizer": fresh_opt}) == 2
    assert got == [{"count": 5}]
    assert all_equal(values(fresh.weights), weights)
    assert random.random() == expected  # not the chief's saved RNG state


def test_a_truncated_index_fails_the_restore_naming_the_url(storage, parts):
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts)
    ck.track({"model": model, "optimizer": optimizer})
    ck.save_now(5, "session")
    commit(storage, parts, world_size=1, attempt=1)
    url = latest_intact(storage).path
    index = os.path.join(url, "ckpt.index")
    with open(index, "r+b") as f:
        f.truncate(os.path.getsize(index) // 2)

    fresh, fresh_opt = make_model(1)
    bad = checkpointer(storage, [], restore_url=url)
    with pytest.raises(CheckpointRestoreError) as info:
        bad.track({"model": fresh, "optimizer": fresh_opt})
    assert info.value.url == url
    assert url in str(info.value)


# -- remote storage ----------------------------------------------------------------------------
@pytest.fixture
def remote():
    storage = Storage(f"memory://bucket/worker-{uuid.uuid4().hex}")
    yield storage
    storage.remove()
    assert not [k for k in storage.fs.store if k.startswith(storage.root)]


def test_save_and_restore_through_remote_storage(remote, parts):
    model, optimizer = make_model(0)
    ck = checkpointer(remote, parts, every_steps=3)
    ck.track({"model": model, "optimizer": optimizer})
    train_step(model, optimizer)
    for step in (1, 2, 3):
        ck.step_end(step)
    weights = values(model.weights)
    (part,) = parts
    sizes = {
        n: remote.size(*staged(remote, part), n) for n in remote.listdir(*staged(remote, part))
    }
    assert part.files == sizes
    assert "ckpt.index" in sizes
    latest = commit(remote, parts, world_size=1, attempt=1)
    assert latest.path.startswith("memory://")
    there = remote.listdir(CKPT_DIR, step_dirname(3))  # nothing moved: named where it is
    assert there == sorted([part.staged, "manifest.json"]) and staged_steps(remote) == []
    assert latest.manifest["at"] == {n: part.staged for n in sizes}

    fresh, fresh_opt = make_model(1)
    again = checkpointer(remote, [], restore_url=latest_intact(remote).path)
    assert again.track({"model": fresh, "optimizer": fresh_opt}) == 3
    assert all_equal(values(fresh.weights), weights)

    # The layout before parts stayed (every file at the step's top, no "at"): it restores.
    d = step_dirname(3)
    for name in sizes:
        remote.move((CKPT_DIR, d, part.staged, name), (CKPT_DIR, d, name))
    remote.remove(CKPT_DIR, d, part.staged)
    old = {k: v for k, v in latest.manifest.items() if k != "at"}
    remote.write_json_atomic(old, CKPT_DIR, d, "manifest.json")
    assert remote.listdir(CKPT_DIR, d) == sorted([*sizes, "manifest.json"])
    older, older_opt = make_model(2)
    flat = checkpointer(remote, [], restore_url=latest_intact(remote).path)
    assert flat.track({"model": older, "optimizer": older_opt}) == 3
    assert all_equal(values(older.weights), weights)


# -- a committed checkpoint is never written again -------------------------------------------
def tree_bytes(root: str) -> dict[str, bytes]:
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


@pytest.mark.parametrize("async_save", [False, True])
def test_no_writer_touches_a_committed_step(storage, parts, capfd, async_save):
    """Interval saves, on-demand saves, session saves and emergency parts at a step whose
    directory has a manifest: each is refused before a byte is written, and says so."""
    from raytf.checkpoint.emergency import emergency_part

    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts, every_steps=5, async_save=async_save)
    ck.track({"model": model, "optimizer": optimizer})
    ck.step_end(5)
    ck.flush()
    commit(storage, parts, world_size=1, attempt=1)
    root = storage.path(CKPT_DIR, step_dirname(5))
    before = tree_bytes(root)
    assert "manifest.json" in before and any(p.endswith("ckpt.index") for p in before)

    train_step(model, optimizer, scale=3.0)  # other weights under the same label
    ck.schedule.last = 0  # the label 5 comes again, as a restarted counter would give it
    ck.step_end(5)  # an interval save
    ck.save_now(5, "session")  # a session's (and an on-demand request's) save
    ck.flush()
    kept = {"refused": None, "latest": (5, None, None), "layout_changed": lambda self: False}
    ck.last_step = type("Kept", (), kept)()
    refused = emergency_part(ck, write_tf=True)
    assert refused == "step 5 is committed already: a committed checkpoint is never written again"
    assert [p.step for p in parts] == [5]  # nothing new reported
    assert tree_bytes(root) == before
    out = capfd.readouterr().out
    assert out.count("checkpoint at step 5 not written: step 5 is committed already") == 2


def committed_bytes(storage: Storage, step: int) -> dict[str, bytes]:
    """Every file of the step's directory, under its path there (a part's folder and
    all: a late writer's folder left in it would show)."""
    root = storage.path(CKPT_DIR, step_dirname(step))
    root = root.rstrip("/") + "/"
    return {p[p.index(root) + len(root) :]: storage.fs.cat_file(p) for p in storage.fs.find(root)}


@pytest.mark.parametrize("on_object_store", [False, True], ids=["local", "object-store"])
@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_a_writer_past_the_check_when_the_commit_lands_cannot_alter_it(
    tmp_path, parts, async_save, on_object_store
):
    """The race the manifest check alone left open: each writer asked "is step 5
    committed?" just before the driver's commit landed (here: it is told no). Interval,
    session (the path of on-demand and final saves) and emergency parts are staged all
    the same (on an object store uploaded, with a host copy); the committed directory
    stays byte for byte, the driver leaves each part out and says so, nothing staged is
    left, and a restore reads the committed state."""
    from raytf import CheckpointConfig
    from raytf.checkpoint.commits import CheckpointCommits
    from raytf.checkpoint.emergency import LastStep, emergency_part
    from raytf.checkpoint.host_copy import HostCopy
    from raytf.messages import CheckpointPart

    if on_object_store:
        storage = Storage(f"memory://bucket/race-{uuid.uuid4().hex}")
        copies = HostCopy(storage.url(), str(tmp_path / "shm"))
    else:
        storage, copies = Storage(str(tmp_path / "run")), None
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts, every_steps=5, async_save=async_save, host_copy=copies)
    ck.last_step = LastStep()  # what keep_last_step=True makes: the emergency part's state
    ck.track({"model": model, "optimizer": optimizer})
    for step in range(1, 6):
        ck.step_end(step)
    ck.flush()
    said = []
    coord = CheckpointCommits(storage, CheckpointConfig(), 1, say=said.append)
    (ckpt,) = coord.on_parts(parts, attempt=1)
    weights_5, before = values(model.weights), committed_bytes(storage, 5)
    assert "manifest.json" in before and any(p.endswith("ckpt.index") for p in before)

    ck.committed_already = lambda step: False  # asked just before the commit landed
    train_step(model, optimizer, scale=3.0)  # other weights under the same label
    ck.schedule.last = 0
    ck.step_end(5)  # an interval save
    ck.save_now(5, "session")
    ck.flush()
    ck.stored = None  # the emergency part writes its own files, not offer the session's
    late = [*parts[1:], emergency_part(ck, write_tf=True)]
    assert all(isinstance(p, CheckpointPart) and p.step == 5 and p.staged for p in late)
    assert len(late) == 3 and "ckpt.index" in late[-1].files
    for part in late:
        assert coord.on_parts([part], attempt=1) == []
    assert committed_bytes(storage, 5) == before
    line = (
        "checkpoint parts of step 5 not committed: it is committed already and a "
        "committed checkpoint is never written again"
    )
    assert said == [line] * 3
    assert staged_steps(storage) == []

    fresh, fresh_opt = make_model(1)
    again = checkpointer(storage, [], restore_url=ckpt.path, host_copy=copies)
    assert again.track({"model": fresh, "optimizer": fresh_opt}) == 5
    assert all_equal(values(fresh.weights), weights_5)
    if on_object_store:
        # The late writers replaced this node's copy of step 5: its id is not the one the
        # manifest names, so the restore read the committed files from the store.
        assert again.restored_from == "storage"
        storage.remove()


def test_a_synchronous_save_of_a_committed_step_still_joins_the_ranks_write(storage, parts):
    """Saving MWMS's on-read variables is a collective: a chief told "step 5 is committed"
    that skipped its TF write would leave every other rank waiting in theirs. It writes
    (to a scratch folder), keeps nothing and reports nothing."""
    model, optimizer = make_model(0)
    ck = checkpointer(storage, parts, every_steps=5)
    ck.track({"model": model, "optimizer": optimizer})
    ck.step_end(5)
    commit(storage, parts, world_size=1, attempt=1)
    writes = []
    real_write = ck._writer.write
    ck._writer.write = lambda prefix: writes.append(prefix) or real_write(prefix)
    ck.schedule.last = 0
    ck.save_now(5, "session")
    assert len(writes) == 1 and not writes[0].startswith(storage.path(CKPT_DIR))
    assert [p.step for p in parts] == [5] and staged_steps(storage) == []


def test_a_custom_layers_own_tf_random_generator_draws_on_after_a_restore(storage, parts):
    """A layer that draws noise from its own ``tf.random.Generator`` (not Keras's seed
    generators): TF's checkpoint tracks the generator's state through the layer, so the
    restored model's next draw is the one the uninterrupted model makes."""

    class Noisy(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.gen = tf.random.Generator.from_seed(1)

        def call(self, x, training=False):
            return x + self.gen.normal(tf.shape(x)) if training else x

    def noisy_model():
        model = keras.Sequential([keras.Input((4,)), Noisy(), keras.layers.Dense(2)])
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
        return model, optimizer

    ones = np.ones((2, 4), "float32")
    model, optimizer = noisy_model()
    ck = checkpointer(storage, parts, every_steps=5)
    ck.track({"model": model, "optimizer": optimizer})
    for step in range(1, 6):
        model(ones, training=True)
        ck.step_end(step)
    ckpt = commit(storage, parts, world_size=1, attempt=1)
    again, again_opt = noisy_model()  # a fresh process's model: its generator at the seed
    state = again.layers[0].gen.state
    assert not np.array_equal(state.numpy(), model.layers[0].gen.state.numpy())
    restored = checkpointer(storage, [], restore_url=ckpt.path)
    assert restored.track({"model": again, "optimizer": again_opt}) == 5
    want = model(ones, training=True).numpy()
    assert np.array_equal(again(ones, training=True).numpy(), want)
