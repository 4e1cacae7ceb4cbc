"""Asynchronous checkpoints in-process: a snapshot in host memory, stored on another thread.

Real TensorFlow throughout (TF's default strategy, one CPU, a small Keras 3 model
and Adam): the snapshot must keep the values of the step it was taken at while
training goes on, and the checkpointer must report each part only once stored,
with at most one persist in flight.
"""

import logging
import os
import threading
import time
import uuid

import numpy as np
import pytest
import tensorflow as tf

from raytf.checkpoint import snapshot
from raytf.checkpoint.layout import (
    CKPT_DIR,
    commit,
    latest_intact,
    list_step_dirs,
    parse_step_dirname,
    staged_dir,
    staged_steps,
    step_dirname,
)
from raytf.rundir.storage import Storage

from .test_worker_checkpointer import checkpointer, make_model, train_step, values

OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


def moving_variables(model, optimizer) -> list:
    """Every variable a training step changes: the weights, Adam's slots and iteration."""
    return list(model.weights) + [v for v in optimizer.variables if "learning_rate" not in v.path]


def state(model, optimizer) -> list[np.ndarray]:
    return values(moving_variables(model, optimizer))


def each_differs(a: list[np.ndarray], b: list[np.ndarray]) -> list[bool]:
    assert len(a) == len(b)
    return [not np.array_equal(x, y) for x, y in zip(a, b)]


def each_equal(a: list[np.ndarray], b: list[np.ndarray]) -> list[bool]:
    assert len(a) == len(b)
    return [np.array_equal(x, y) for x, y in zip(a, b)]


def restored(prefix: str, seed: int = 1) -> list[np.ndarray]:
    """A fresh model and Adam (other weights) restored from the TF files at ``prefix``."""
    model, optimizer = make_model(seed)
    tf.train.Checkpoint(model=model, optimizer=optimizer).read(
        prefix
    ).assert_existing_objects_matched()
    return state(model, optimizer)


def async_checkpointer(storage, parts, *, every_steps=None, restore_url=None):
    return checkpointer(
        storage, parts, every_steps=every_steps, restore_url=restore_url, async_save=True
    )


class GatedStorage(Storage):
    """Local storage whose persist thread waits, before writing a step, until let through.

    ``_persist`` asks for a path of the step (is it committed, where to stage it)
    before it writes anything, so a gate there holds the write until the test has
    trained on after the save.
    """

    def __init__(self, root: str, steps):
        super().__init__(root)
        self.gates = {step_dirname(s): threading.Event() for s in steps}

    def path(self, *parts: str) -> str:
        gate = self.gates.get(step_of(parts))
        if gate is not None and threading.current_thread().name == "raytf-persist":
            assert gate.wait(10), f"{parts[-1]} was never let through"
        return super().path(*parts)

    def let_through(self, step: int) -> None:
        self.gates[step_dirname(step)].set()


class SlowStorage(Storage):
    """A real fsspec memory filesystem whose uploads take ``delay`` seconds each."""

    def __init__(self, root: str, delay: float):
        super().__init__(root)
        self.delay = delay
        self.stored: list[tuple[str, float]] = []  # (step dirname, monotonic time stored)

    def upload_dir(self, local_dir, *parts, names=None):
        time.sleep(self.delay)
        super().upload_dir(local_dir, *parts, names=names)
        self.stored.append((step_of(parts), time.monotonic()))


class FailingStorage(Storage):
    """A real fsspec memory filesystem that cannot store the steps' parts in ``fail``."""

    def __init__(self, root: str, fail: set[str]):
        super().__init__(root)
        self.fail = fail

    def upload_dir(self, local_dir, *parts, names=None):
        if step_of(parts) in self.fail:
            raise OSError(f"no space left for {step_of(parts)}")
        super().upload_dir(local_dir, *parts, names=names)


def memory_root() -> str:
    return f"memory://bucket/async-{uuid.uuid4().hex}"


def cleanup(storage: Storage) -> None:
    storage.remove()
    assert not [k for k in storage.fs.store if k.startswith(storage.root)]


def step_of(parts: tuple[str, ...]) -> str | None:
    """The step directory's name in a storage path (a step's own, or its staging's)."""
    return next((p for p in parts if parse_step_dirname(p) is not None), None)


def staged(storage, part) -> tuple[str, ...]:
    """Where a part waits for its commit (a folder of its own)."""
    return (CKPT_DIR, *staged_dir(storage, part.step, part.staged))


def remote_sizes(storage: Storage, part) -> dict[str, int]:
    return {
        n: storage.size(*staged(storage, part), n) for n in storage.listdir(*staged(storage, part))
    }


@pytest.fixture
def raytf_logs(caplog):
    caplog.set_level(logging.INFO, logger="raytf")
    return caplog


# -- the snapshot ----------------------------------------------------------------------------
def test_a_snapshot_keeps_the_values_it_was_taken_at_while_training_goes_on(tmp_path):
    model, optimizer = make_model(0)
    train_step(model, optimizer)  # Adam's slots hold something other than zeros
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)

    snap = snapshot.take(ckpt)
    at_snapshot = state(model, optimizer)
    train_step(model, optimizer, scale=-3.0)
    train_step(model, optimizer, scale=2.0)
    live = state(model, optimizer)
    assert all(each_differs(at_snapshot, live))  # the two steps moved every variable

    prefix = str(tmp_path / "snap" / "ckpt")
    snapshot.write(snap, prefix)
    got = restored(prefix)
    assert all(each_equal(got, at_snapshot))
    assert all(each_differs(got, live))
    assert int(got[len(model.weights)]) == 1  # Adam's iteration count at the snapshot
    # The snapshot is the model's state, not the fresh model's: that one differed.
    assert all(each_differs(state(*make_model(1)), at_snapshot))


def test_a_reader_reads_each_step_what_take_does_and_keeps_it_as_training_goes_on(tmp_path):
    """The per-step form (an emergency checkpoint's copy): the layout read once, then the
    values read again at each call, each snapshot the state of its own step."""
    model, optimizer = make_model(0)
    train_step(model, optimizer)
    step = tf.Variable(1, dtype=tf.int64, trainable=False)
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, raytf_step=step)
    reader = snapshot.Reader.of(ckpt)
    assert reader is not None  # plain variables only: read in one traced call

    first = reader.read()
    at_first = state(model, optimizer)
    train_step(model, optimizer, scale=-3.0)
    step.assign(2)
    second = reader.read()  # read again: the new values, not the first call's
    at_second = state(model, optimizer)
    train_step(model, optimizer, scale=2.0)
    assert all(each_differs(at_first, at_second))

    for snap, expected, n in ((first, at_first, 1), (second, at_second, 2)):
        prefix = str(tmp_path / f"snap{n}" / "ckpt")
        snapshot.write(snap, prefix)
        assert all(each_equal(restored(prefix), expected))
        assert (
            tf.train.load_checkpoint(prefix).get_tensor("raytf_step/.ATTRIBUTES/VARIABLE_VALUE")
            == n
        )
    # The same keys as TF's own write of the same checkpoint.
    sync = ckpt.write(str(tmp_path / "sync" / "ckpt"))
    assert set(tf.train.load_checkpoint(prefix).get_variable_to_shape_map()) == set(
        tf.train.load_checkpoint(sync).get_variable_to_shape_map()
    )
    assert snapshot.signature(ckpt) == reader.signature
    ckpt.extra = tf.Variable(0.0)  # a value made since the layout was read
    assert snapshot.signature(ckpt) != reader.signature


def test_a_reader_reads_variables_made_under_a_strategy_in_its_traced_call(tmp_path):
    """Under MWMS every variable is a mirrored one: Keras 3's hold one, a loop's own
    ``tf.Variable`` is one, and TF saves the latter through a legacy saveable. The reader
    must read them all in its traced call (before, it gave up and each step's copy
    walked TF's object graph: 5-20 ms a step for the example job's small model)."""
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model, optimizer = make_model(0)
        counter = tf.Variable(0, dtype=tf.int64, trainable=False)
    assert isinstance(counter, tf.distribute.DistributedValues)
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, counter=counter)
    reader = snapshot.Reader.of(ckpt)
    assert reader is not None

    def move(k):
        for v in moving_variables(model, optimizer):
            v.assign(v + tf.cast(k, v.dtype))
        counter.assign_add(k)

    move(1)
    first, at_first = reader.read(), (state(model, optimizer), int(counter.numpy()))
    move(5)
    second, at_second = reader.read(), (state(model, optimizer), int(counter.numpy()))
    move(7)
    for snap, (expected, count), n in ((first, at_first, 1), (second, at_second, 2)):
        prefix = str(tmp_path / f"snap{n}" / "ckpt")
        snapshot.write(snap, prefix)
        assert all(each_equal(restored(prefix), expected))
        got = tf.train.load_checkpoint(prefix).get_tensor("counter/.ATTRIBUTES/VARIABLE_VALUE")
        assert got == count
    assert at_first[1] == 1 and at_second[1] == 6  # each read its own step's values
    # TF wraps the loop's own variable anew at every gather: still the same layout.
    assert snapshot.signature(ckpt) == reader.signature
    ckpt.extra = tf.Variable(0.0)
    assert snapshot.signature(ckpt) != reader.signature


def test_a_snapshot_writes_what_a_synchronous_write_at_the_same_moment_does(tmp_path):
    model, optimizer = make_model(0)
    train_step(model, optimizer, scale=0.5)
    step = tf.Variable(7, dtype=tf.int64, trainable=False)
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, raytf_step=step)

    sync_prefix = ckpt.write(str(tmp_path / "sync" / "ckpt"))
    snap = snapshot.take(ckpt)
    train_step(model, optimizer, scale=4.0)
    step.assign(8)
    snap_prefix = str(tmp_path / "snap" / "ckpt")
    snapshot.write(snap, snap_prefix)

    assert all(each_equal(restored(snap_prefix), restored(sync_prefix)))
    # Key by key and byte for byte, the same tensors under the same checkpoint keys.
    sync_reader = tf.train.load_checkpoint(sync_prefix)
    snap_reader = tf.train.load_checkpoint(snap_prefix)
    sync_keys = set(sync_reader.get_variable_to_shape_map()) - {OBJECT_GRAPH}
    snap_keys = set(snap_reader.get_variable_to_shape_map()) - {OBJECT_GRAPH}
    assert snap_keys == sync_keys
    assert "raytf_step/.ATTRIBUTES/VARIABLE_VALUE" in snap_keys
    for key in sorted(sync_keys):
        assert np.array_equal(snap_reader.get_tensor(key), sync_reader.get_tensor(key)), key
    assert snap_reader.get_tensor("raytf_step/.ATTRIBUTES/VARIABLE_VALUE") == 7


# -- the checkpointer --------------------------------------------------------------------------
def test_async_interval_saves_report_true_files_and_restore_the_values_at_the_save(tmp_path, parts):
    storage = GatedStorage(str(tmp_path / "run"), steps=(5, 10))
    model, optimizer = make_model(0)
    ck = async_checkpointer(storage, parts, every_steps=5)
    ck.track({"model": model, "optimizer": optimizer})
    at_save = {}
    for step in range(1, 11):
        train_step(model, optimizer, scale=float(step))
        ck.step_end(step)
        if step % 5 == 0:
            at_save[step] = state(model, optimizer)
        if step == 6:
            assert parts == []  # step 5's files are not written yet: training went on
            storage.let_through(5)
    # Trained on after the save at 10, before its persist writes a file.
    train_step(model, optimizer, scale=-5.0)
    train_step(model, optimizer, scale=3.0)
    live = state(model, optimizer)
    assert [p.step for p in parts] == [5]
    storage.let_through(10)
    ck.flush()

    assert [(p.rank, p.step, p.reason) for p in parts] == [(0, 5, "interval"), (0, 10, "interval")]
    assert staged_steps(storage) == [5, 10] and storage.listdir(CKPT_DIR) == [".staging"]
    for part in parts:
        d = storage.path(*staged(storage, part))
        on_disk = {n: os.path.getsize(os.path.join(d, n)) for n in os.listdir(d)}
        assert part.files == on_disk
        assert {"ckpt.index", "state_rank0.json"} <= set(part.files)
        assert any(n.startswith("ckpt.data-") for n in part.files)
        assert all(size > 0 for size in part.files.values())
        assert 0 <= part.seconds <= part.persist_seconds
        reader = tf.train.load_checkpoint(os.path.join(d, "ckpt"))
        assert reader.get_tensor("raytf_step/.ATTRIBUTES/VARIABLE_VALUE") == part.step

    for step in (5, 10):
        commit(storage, [p for p in parts if p.step == step], world_size=1, attempt=1)
    latest = latest_intact(storage)
    assert latest.step == 10
    fresh, fresh_opt = make_model(1)
    again = async_checkpointer(storage, [], every_steps=5, restore_url=latest.path)
    assert again.track({"model": fresh, "optimizer": fresh_opt}) == 10
    got = state(fresh, fresh_opt)
    assert all(each_equal(got, at_save[10]))
    assert all(each_differs(got, live))
    assert all(each_differs(got, at_save[5]))
    # The older checkpoint holds its own step's values, not the later ones.
    url_5 = storage.url(CKPT_DIR, step_dirname(5))
    older, older_opt = make_model(2)
    assert (
        async_checkpointer(storage, [], restore_url=url_5).track(
            {"model": older, "optimizer": older_opt}
        )
        == 5
    )
    assert all(each_equal(state(older, older_opt), at_save[5]))


def test_a_save_waits_for_the_one_in_flight_and_says_so(parts, raytf_logs):
    delay = 1.0
    slow = SlowStorage(memory_root(), delay)
    try:
        model, optimizer = make_model(0)
        ck = async_checkpointer(slow, parts, every_steps=5)
        ck.track({"model": model, "optimizer": optimizer})
        for step in range(1, 5):
            ck.step_end(step)
        t0 = time.monotonic()
        ck.step_end(5)
        first_took = time.monotonic() - t0
        assert first_took < delay / 2  # the upload goes on behind the loop
        assert parts == []
        persists = [t for t in threading.enumerate() if t.name == "raytf-persist"]
        assert len(persists) == 1

        t1 = time.monotonic()
        for step in range(6, 11):
            ck.step_end(step)
        second_took = time.monotonic() - t1
        returned = time.monotonic()
        # Blocked until step 5 was stored, and no longer: step 10's upload still sleeps.
        assert [p.step for p in parts] == [5]
        assert [name for name, _ in slow.stored] == [step_dirname(5)]
        assert slow.stored[0][1] <= returned
        assert second_took >= delay / 2
        assert len([t for t in threading.enumerate() if t.name == "raytf-persist"]) == 1

        ck.flush()
        assert [(p.step, p.reason) for p in parts] == [(5, "interval"), (10, "interval")]
        assert [name for name, _ in slow.stored] == [step_dirname(5), step_dirname(10)]
        for part in parts:
            assert part.files == remote_sizes(slow, part)
            assert part.seconds <= part.persist_seconds
        assert parts[0].persist_seconds >= delay
        assert parts[0].seconds < delay / 2  # the loop's stall was the snapshot alone
        assert parts[1].seconds >= delay / 2  # the loop stood still while it waited

        waits = [
            r
            for r in raytf_logs.records
            if r.name == "raytf" and r.levelno == logging.WARNING and "waited" in r.getMessage()
        ]
        assert len(waits) == 1
        assert "step 10" in waits[0].getMessage()
    finally:
        cleanup(slow)


def test_a_persist_that_fails_reports_nothing_and_the_next_save_still_works(
    parts, raytf_logs, capsys
):
    failing = FailingStorage(memory_root(), fail={step_dirname(5)})
    try:
        model, optimizer = make_model(0)
        ck = async_checkpointer(failing, parts, every_steps=5)
        ck.track({"model": model, "optimizer": optimizer})
        for step in range(1, 6):
            train_step(model, optimizer)
            ck.step_end(step)
        ck.flush()
        assert parts == []
        assert staged_steps(failing) == []
        # One line with the cause (a full disk fails every save: no traceback each time).
        out = capsys.readouterr().out
        assert "checkpoint at step 5 could not be stored (OSError: no space left" in out
        assert out.count("could not be stored") == 1 and "Traceback" not in out

        for step in range(6, 11):
            train_step(model, optimizer)
            ck.step_end(step)
        weights_10 = values(model.weights)
        train_step(model, optimizer, scale=-2.0)
        ck.flush()
        assert [(p.step, p.reason) for p in parts] == [(10, "interval")]
        assert list_step_dirs(failing) == [10]  # step 10's part, where it stays
        assert parts[0].files == remote_sizes(failing, parts[0])

        latest = commit(failing, parts, world_size=1, attempt=1)
        fresh, fresh_opt = make_model(1)
        again = async_checkpointer(failing, [], restore_url=latest_intact(failing).path)
        assert latest.step == 10
        assert again.track({"model": fresh, "optimizer": fresh_opt}) == 10
        assert all(each_equal(values(fresh.weights), weights_10))
    finally:
        cleanup(failing)


def test_a_session_save_returns_only_once_its_part_is_reported(parts):
    delay = 0.5
    slow = SlowStorage(memory_root(), delay)
    try:
        model, optimizer = make_model(0)
        ck = async_checkpointer(slow, parts, every_steps=5)
        ck.track({"model": model, "optimizer": optimizer})
        t0 = time.monotonic()
        ck.save_now(3, "session")
        took = time.monotonic() - t0
        assert [(p.step, p.reason) for p in parts] == [(3, "session")]
        assert parts[0].files == remote_sizes(slow, parts[0])
        assert took >= delay
        assert not [t for t in threading.enumerate() if t.name == "raytf-persist"]

        # An interval save still in flight is stored first, and both are reported in order.
        ck.step_end(4)
        ck.step_end(5)
        assert [p.step for p in parts] == [3]
        ck.save_now(6, "session")
        assert [(p.step, p.reason) for p in parts] == [
            (3, "session"),
            (5, "interval"),
            (6, "session"),
        ]
        assert [name for name, _ in slow.stored] == [step_dirname(s) for s in (3, 5, 6)]
    finally:
        cleanup(slow)
