"""Keeping the best checkpoints by a reported metric (Ray Train's checkpoint_score_attribute)."""

import pytest

from raytf import CheckpointConfig, ConfigError
from raytf.checkpoint.commits import CheckpointCommits
from raytf.checkpoint.layout import CKPT_DIR, SCORES, committed
from raytf.checkpoint.retention import ranked, to_drop

from .checkpoint_parts import write_parts


def test_ranked_orders_by_score_and_puts_unscored_last():
    scores = {10: 0.5, 20: 0.2, 30: None, 40: 0.2}
    assert ranked([10, 20, 30, 40], scores, "min") == [40, 20, 10, 30]
    assert ranked([10, 20, 30, 40], scores, "max") == [10, 40, 20, 30]


def test_to_drop_keeps_the_best_the_newest_and_the_unscored():
    done = [10, 20, 30, 40]
    assert to_drop(done, 2, None, "min") == [10, 20]  # no attribute: the oldest go
    scores = {10: 0.1, 20: 0.9, 30: 0.5}  # 40 has no score yet
    assert to_drop(done, 1, scores, "min") == [20, 30]
    assert to_drop(done, 1, scores, "max") == [10, 30]
    assert to_drop(done, 4, scores, "min") == []


def commits(storage, order="min"):
    config = CheckpointConfig(
        num_to_keep=1, checkpoint_score_attribute="val_loss", checkpoint_score_order=order
    )
    return CheckpointCommits(storage, config, world_size=2)


def test_a_checkpoint_is_scored_by_the_report_of_its_step_even_when_it_comes_later(storage):
    coord = commits(storage)
    # Epoch 1 ends at step 10: the checkpoint commits before rank 0's epoch-end report.
    coord.note_report({"step": 10, "loss": 1.0})
    coord.on_parts(write_parts(storage, 10), attempt=1)
    coord.note_report({"step": 10, "val_loss": 0.3, "epoch_end": True})
    coord.note_report({"step": 12, "loss": 0.9})
    coord.on_parts(write_parts(storage, 20), attempt=1)
    coord.note_report({"step": 20, "val_loss": 0.7, "epoch_end": True})
    coord.note_report({"step": 22, "loss": 0.8})
    coord.on_parts(write_parts(storage, 30), attempt=1)  # 20 (0.7) is now the worst
    assert committed(storage) == [10, 30]
    coord.note_report({"step": 30, "val_loss": 0.5, "epoch_end": True})
    assert coord.best() == [(10, 0.3), (30, 0.5)]


def test_best_is_newest_first_without_a_score_attribute(storage):
    coord = CheckpointCommits(storage, CheckpointConfig(num_to_keep=2), world_size=2)
    for step in (10, 20, 30):
        coord.on_parts(write_parts(storage, step), attempt=1)
    assert coord.best() == [(30, None), (20, None)]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"checkpoint_score_attribute": ""}, "checkpoint_score_attribute"),
        ({"checkpoint_score_order": "lowest"}, "checkpoint_score_order = 'lowest'"),
        ({"export_saved_model": "yes"}, "export_saved_model = 'yes'"),
    ],
)
def test_bad_score_settings_are_refused(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        CheckpointConfig(**kwargs)


def test_a_driver_continuing_the_run_keeps_the_scores_its_predecessor_decided(storage):
    first = commits(storage)
    first.note_report({"step": 10, "val_loss": 0.1, "epoch_end": True})
    first.on_parts(write_parts(storage, 10), attempt=1)
    first.note_report({"step": 12, "loss": 0.5})  # step 10's score is decided: 0.1
    # The driver is killed; the next one scores its own checkpoints worse.
    second = commits(storage)
    for step, loss in ((20, 0.7), (30, 0.9)):
        second.note_report({"step": step, "val_loss": loss, "epoch_end": True})
        second.on_parts(write_parts(storage, step), attempt=2)
        second.note_report({"step": step + 2, "loss": 0.5})
    assert committed(storage) == [10, 30]  # the best (before the restart) and the newest
    assert second.best() == [(10, 0.1), (30, 0.9)]


@pytest.mark.parametrize("damage", [b"{not json", b"[1, 2]", b'{"10": "best"}', b'{"ten": 0.1}'])
def test_a_damaged_scores_file_is_set_aside_naming_it(storage, caplog, damage):
    """A scores file that is not raytf's (damaged, or written by hand) must not crash the
    next driver: it says so, naming the file, and ranks the kept checkpoints unscored."""
    first = commits(storage)
    first.note_report({"step": 10, "val_loss": 0.1, "epoch_end": True})
    first.on_parts(write_parts(storage, 10), attempt=1)
    first.note_report({"step": 12, "loss": 0.5})
    path = storage.path(CKPT_DIR, SCORES)
    with open(path, "wb") as f:
        f.write(damage)
    with caplog.at_level("WARNING", logger="raytf"):
        second = commits(storage)
    assert f"ignoring {path}: not a scores file raytf wrote" in caplog.text
    assert second.best() == [(10, None)]  # kept, unscored
