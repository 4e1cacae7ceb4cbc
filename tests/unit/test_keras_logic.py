"""Pure logic of the Keras path: batch arithmetic, callbacks per rank, history, options."""

import pytest

from raytf.checkpoint.schedule import SaveSchedule, crossed
from raytf.data.batching import per_replica_batch, steps_per_epoch_from_shards
from raytf.errors import ConfigError
from raytf.keras.callbacks import callbacks_for_rank, check_callbacks
from raytf.keras.loop import FitSpec
from raytf.keras.steps import check_step_mode
from raytf.keras.trainer import check_fit_options
from raytf.result import history_from_reports
from raytf.worker.user_fn import call_user

pytestmark = pytest.mark.unit


def test_per_replica_batch_divides_or_says_what_would():
    assert per_replica_batch(128, 4) == 32
    with pytest.raises(ConfigError, match=r"130 .* 4 replicas .* 128 or 132"):
        per_replica_batch(130, 4)
    with pytest.raises(ConfigError, match="e.g. 4"):
        per_replica_batch(3, 4)
    with pytest.raises(ConfigError, match="positive int"):
        per_replica_batch(0, 2)


def test_uneven_or_tiny_shards_are_errors():
    assert steps_per_epoch_from_shards([24, 24], 1) == 24
    assert steps_per_epoch_from_shards([24, 24], 2) == 12
    with pytest.raises(ConfigError, match="uneven .*23 to 24"):
        steps_per_epoch_from_shards([24, 23], 1)
    with pytest.raises(ConfigError, match="smaller than one global batch"):
        steps_per_epoch_from_shards([0, 0], 1)


# Stand-ins named like Keras's callbacks: the rules go by class name.
class TensorBoard:
    pass


class EarlyStopping:
    pass


class BackupAndRestore:
    pass


class MyBoard(TensorBoard):
    pass


def test_file_writing_callbacks_run_on_the_chief_only():
    cbs = [TensorBoard(), EarlyStopping(), MyBoard()]
    assert callbacks_for_rank(cbs, 0) == cbs
    assert [type(c) for c in callbacks_for_rank(cbs, 1)] == [EarlyStopping]


def test_backup_and_restore_is_refused_with_the_raytf_way():
    with pytest.raises(ConfigError, match="checkpoint_every_steps"):
        check_callbacks([BackupAndRestore()])


def test_history_keeps_epoch_ends_only_in_order():
    reports = [
        {"step": 4, "loss": 3.0},
        {"step": 8, "epoch": 1, "epoch_end": True, "loss": 2.0, "val_loss": 2.5},
        {"step": 12, "loss": 1.5},
        {"step": 16, "epoch": 2, "epoch_end": True, "loss": 1.0, "val_loss": 1.2},
    ]
    assert history_from_reports(reports) == {"loss": [2.0, 1.0], "val_loss": [2.5, 1.2]}


def test_interval_checkpoints_fire_when_a_multi_step_call_crosses_a_multiple():
    assert crossed(16, 20, 20) and crossed(18, 22, 20)
    assert not crossed(20, 24, 20) and not crossed(21, 39, 20)
    assert crossed(None, 40, 20) and not crossed(None, 41, 20)


def test_an_interval_inside_a_fit_epoch_is_saved_at_the_epochs_end():
    """Keras's fit resumes at epoch starts only: an interval crossed at a step it cannot
    resume from is owed to the next resumable step (one save, however many crossed).
    Seen: 20-step intervals in a 120-step epoch, a kill at step 95, a resume from 80
    that replayed the whole epoch and ended at step 200."""
    schedule = SaveSchedule(rank=0, world_size=2, every_steps=20)
    schedule.last = 0
    saves = []
    for step in range(1, 121):  # one epoch, its last step resumable (steps known)
        reason, _ = schedule.due(step, resumable=step == 120)
        saves += [(step, reason)] if reason else []
    assert saves == [(120, "interval")]
    for step in range(121, 241):  # an epoch of unknown length: its last batch ends twice
        assert schedule.due(step, resumable=False) == (None, None)
    assert schedule.due(240, resumable=True) == ("interval", None)
    for step in range(241, 251):  # nothing crossed since: nothing owed at the next end
        assert schedule.due(step, resumable=False) == (None, None)
    assert schedule.due(250, resumable=True) == (None, None)
    # Every resumable step: intervals as before.
    assert [s for s in range(251, 301) if schedule.due(s, True)[0]] == [260, 280, 300]


def test_user_functions_get_the_config_only_when_they_ask():
    assert call_user(lambda: 1, config={"a": 1}) == 1
    assert call_user(lambda c: c["a"], config={"a": 2}) == 2
    assert call_user(lambda ic: ic, "ctx", config={}) == "ctx"
    assert call_user(lambda ic, c: (ic, c["a"]), "ctx", config={"a": 3}) == ("ctx", 3)


def test_fit_options_are_checked_on_the_driver():
    def f(*_):
        return None

    check_fit_options(FitSpec(f, f, 64), 2)
    with pytest.raises(ConfigError, match="step_mode"):
        check_step_mode("graph", 1)
    with pytest.raises(ConfigError, match="steps_per_call"):
        check_step_mode("compiled", 0)
    with pytest.raises(ConfigError, match="epochs"):
        check_fit_options(FitSpec(f, f, 64, epochs=0), 2)
    with pytest.raises(ConfigError, match="dataset_fn"):
        check_fit_options(FitSpec(f, "data.csv", 64), 2)
    with pytest.raises(ConfigError, match="does not divide"):
        check_fit_options(FitSpec(f, f, 65), 2)
