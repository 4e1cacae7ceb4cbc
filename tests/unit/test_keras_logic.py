"""Pure logic of the Keras path: batch arithmetic, callbacks per rank, history, options."""

import pytest

from raytf.data.batching import per_replica_batch, steps_per_epoch_from_shards
from raytf.errors import ConfigError
from raytf.keras.callbacks import callbacks_for_rank, check_callbacks
from raytf.keras.loop import FitSpec
from raytf.keras.steps import check_step_mode
from raytf.keras.trainer import check_fit_options
from raytf.result import history_from_reports
from raytf.worker.checkpointer import _crossed
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
    assert _crossed(16, 20, 20) and _crossed(18, 22, 20)
    assert not _crossed(20, 24, 20) and not _crossed(21, 39, 20)
    assert _crossed(None, 40, 20) and not _crossed(None, 41, 20)


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
