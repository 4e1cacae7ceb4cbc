"""The dependency probes: every private API raytf uses is there on the pinned versions,
and a mismatch either falls back with a line for the driver's screen or stops the run
with an error naming the package, the installed version and the supported one."""

import io
import os
import re

import pytest

from raytf import compat
from raytf.checkpoint import unbroadcast
from raytf.driver.progress import Progress
from raytf.errors import DependencyError
from raytf.worker import patches
from raytf.worker.fit import mwms as keras_fit

pytestmark = pytest.mark.unit


def test_every_probe_passes_on_the_installed_versions():
    probes = patches.PROBES
    assert set(probes) >= {*compat.PROBES, keras_fit.PROBE, unbroadcast.PROBE}
    report = compat.run_probes(probes)
    assert report.failed == frozenset() and report.notes == ()
    for probe in probes:
        assert report.ok(probe)


def test_the_package_metadata_pins_the_versions_the_probes_support():
    with open(f"{compat.__file__.rsplit('/raytf/', 1)[0]}/pyproject.toml") as f:
        pins = re.findall(r'"([\w.-]+(?:\[[^\]]*\])?==[^"]+)"', f.read())  # every == pin
    for package, release in compat.SUPPORTED.items():
        names = {"tensorflow": ("tensorflow-cpu", "tensorflow[and-cuda]")}.get(package, (package,))
        found = [p for p in pins if re.match(rf"({'|'.join(map(re.escape, names))})(\[.*\])?==", p)]
        assert found and all(p.endswith(f"=={release}.*") for p in found), (package, found)


def test_a_tensorflow_mismatch_falls_back_to_synchronous_saves(monkeypatch):
    monkeypatch.setattr(compat, "installed", lambda package: "2.22.0")
    report = compat.run_probes((compat.SNAPSHOT, compat.ITERATOR_REAPER, compat.COORDINATION))
    assert not report.ok(compat.SNAPSHOT)  # relies on the saver's layout: falls back
    # Used by name, each name found: another release changes nothing there.
    assert report.ok(compat.ITERATOR_REAPER) and report.ok(compat.COORDINATION)
    assert report.ok(keras_fit.PROBE)  # not probed here
    assert len(report.notes) == 1
    snapshot_note = next(n for n in report.notes if n.startswith("asynchronous"))
    assert "tensorflow 2.22.0 is installed, raytf supports 2.21.*" in snapshot_note
    assert "written synchronously" in snapshot_note


def test_a_missing_internal_without_a_plain_path_stops_the_run(monkeypatch):
    from tensorflow.python.eager import context

    monkeypatch.setattr(compat, "installed", lambda package: "2.22.0")
    monkeypatch.delattr(type(context.context()), "get_config_key_value")
    with pytest.raises(DependencyError) as err:
        compat.run_probes((compat.SNAPSHOT, compat.COORDINATION))
    message = str(err.value)
    assert message.startswith("tensorflow 2.22.0 is installed, raytf supports 2.21.*")
    assert "on-demand checkpoints" in message and "tensorflow==2.21.*" in message
    assert "lacks get_config_key_value" in message


def test_a_changed_internal_on_the_supported_version_is_found(monkeypatch):
    from tensorflow.python.checkpoint.checkpoint import TrackableSaver

    monkeypatch.delattr(TrackableSaver, "_gather_serialized_tensors")
    report = compat.run_probes((compat.SNAPSHOT,))
    assert report.notes == (
        f"{compat.SNAPSHOT.feature}: TrackableSaver._gather_serialized_tensors is gone; "
        f"{compat.SNAPSHOT.fallback}",
    )


def test_a_keras_mismatch_leaves_fit_unpatched_and_says_so(monkeypatch):
    import keras

    monkeypatch.setattr(keras, "__version__", "3.16.0")
    report = compat.run_probes((keras_fit.PROBE,))
    assert not report.ok(keras_fit.PROBE)
    assert "keras 3.16.0 is installed, raytf supports 3.15.*" in report.notes[0]
    assert "raytf.KerasTrainer is not affected" in report.notes[0]


def test_a_probe_that_cannot_look_counts_as_a_no():
    def broken():
        raise ImportError("no module named tensorflow.python.checkpoint")

    probe = compat.Probe("a feature", "ray", broken, "the plain path")
    report = compat.run_probes((probe,))
    assert report.notes == (
        "a feature: ImportError: no module named tensorflow.python.checkpoint; the plain path",
    )


def test_a_fallback_is_shown_once_a_run_even_when_quiet():
    out = io.StringIO()
    progress = Progress(verbose=0, stream=out)
    for _ in range(3):  # every rank, every attempt says it
        progress.notice("asynchronous checkpoints: ...; written synchronously")
    assert (
        out.getvalue() == "[raytf] warning: asynchronous checkpoints: ...; written synchronously\n"
    )


def test_a_name_by_name_guard_is_probed_by_its_names_not_the_release(monkeypatch):
    from ray._private import ray_constants

    monkeypatch.setattr(compat, "installed", lambda package: "2.61.0")
    assert compat.run_probes((compat.RAY_LOG_PREFIX,)).notes == ()  # names there: no change
    monkeypatch.delattr(ray_constants, "LOG_PREFIX_ACTOR_NAME")
    (note,) = compat.run_probes((compat.RAY_LOG_PREFIX,)).notes
    assert "lacks LOG_PREFIX_ACTOR_NAME" in note and "default prefixes" in note


def test_a_restores_optimizer_slots_are_made_without_a_broadcast_only_under_mwms(monkeypatch):
    """The swap is on the strategy's own object, for the block only; any other strategy
    (one process's MirroredStrategy here) is left as it is."""
    import tensorflow as tf
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars

    monkeypatch.setattr(unbroadcast, "_enabled", True)
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0"])
    with unbroadcast.locally(mirrored):
        assert "_get_variable_creator_initial_value" not in vars(mirrored.extended)
    ext = cars.CollectiveAllReduceExtended.__new__(cars.CollectiveAllReduceExtended)
    strategy = type("S", (), {"extended": ext})()
    with unbroadcast.locally(strategy):
        local = ext._get_variable_creator_initial_value
        assert local(0, "/cpu:0", None, initial_value="v") == "v"  # no collective
    assert "_get_variable_creator_initial_value" not in vars(ext)
    monkeypatch.setattr(unbroadcast, "_enabled", False)  # its probe failed
    with unbroadcast.locally(strategy):
        assert "_get_variable_creator_initial_value" not in vars(ext)


def test_ranks_that_would_take_different_paths_stop_the_group_naming_each_node(monkeypatch):
    same = compat.run_probes(patches.PROBES)
    assert compat.disagreement([same, same], ["a (10.0.0.1)", "b (10.0.0.2)"]) is None
    monkeypatch.setattr(compat, "installed", lambda p: "2.20.0" if p == "tensorflow" else "9")
    older = compat.run_probes(patches.PROBES)
    error = compat.disagreement([same, older], ["a (10.0.0.1)", "b (10.0.0.2)"])
    assert isinstance(error, DependencyError)
    text = str(error)
    assert "rank 0 on a (10.0.0.1): keras 3.15" in text and "falls back: nothing" in text
    assert "rank 1 on b (10.0.0.2): keras 9, ray 9, tensorflow 2.20.0" in text
    assert compat.SNAPSHOT.feature in text.split("rank 1")[1]


def test_a_worker_running_another_build_of_raytf_is_refused_naming_it(tmp_path):
    """``__version__`` is a constant: two builds of one version (a node's own install, an
    older ship) differ in their sources. The driver compares each worker's digest of
    them with its own at set-up."""
    import shutil

    import raytf

    own = os.path.dirname(os.path.abspath(raytf.__file__))
    copy = tmp_path / "raytf"
    shutil.copytree(own, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert compat.source_digest(str(copy)) == compat.source_digest()
    (copy / "messages.py").write_text((copy / "messages.py").read_text() + "\n# changed\n")
    other = compat.source_digest(str(copy))
    assert other != compat.source_digest()
    mine = compat.source_digest()
    assert compat.other_build([mine, mine], ["a (10.0.0.1)", "b (10.0.0.2)"]) is None
    error = compat.other_build([mine, other, None], ["a", "b (10.0.0.2)", "c (10.0.0.3)"])
    assert isinstance(error, DependencyError)
    assert f"rank 1 on b (10.0.0.2): {other}" in str(error)
    assert "rank 2 on c (10.0.0.3): an older build" in str(error) and "rank 0" not in str(error)
