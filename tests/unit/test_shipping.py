"""The driver ships its raytf package to the workers (raytf.group.shipping): when, merged
how with the job's runtime_env, and kept processes matched by what was shipped."""

import logging

import pytest

from raytf.group import kept, shipping
from raytf.settings import Settings

pytestmark = pytest.mark.unit

URI = "gcs://_ray_pkg_0123456789abcdef.zip"


@pytest.fixture
def cluster(monkeypatch):
    """A job environment and an upload that answer without Ray; ``uploads`` records."""
    state = {"job": {}, "uploads": [], "pkg": "/home/u/src/raytf-checkout/raytf", "nodes": 3}

    def upload(pkg):
        state["uploads"].append(pkg)
        return URI

    monkeypatch.setattr(shipping, "job_runtime_env", lambda: dict(state["job"]))
    monkeypatch.setattr(shipping, "upload", upload)
    monkeypatch.setattr(shipping, "package_dir", lambda: state["pkg"])
    monkeypatch.setattr(shipping, "workers_may_land_elsewhere", lambda: state["nodes"] > 1)
    monkeypatch.setattr(kept, "job_runtime_env", lambda: dict(state["job"]))
    return state


def test_the_driver_s_package_goes_after_the_job_s_own_py_modules(cluster):
    cluster["job"] = {
        "working_dir": "gcs://_ray_pkg_job.zip",
        "py_modules": ["gcs://_ray_pkg_helpers.zip"],
        "env_vars": {"A": "1"},
    }
    option = shipping.worker_runtime_env(Settings())
    # Only py_modules is given: Ray replaces that field whole, and keeps the others.
    assert option == {"py_modules": ["gcs://_ray_pkg_helpers.zip", URI]}
    assert cluster["uploads"] == ["/home/u/src/raytf-checkout/raytf"]
    merged = shipping.effective_env(cluster["job"], option)
    assert merged["working_dir"] == "gcs://_ray_pkg_job.zip" and merged["env_vars"] == {"A": "1"}


def test_a_job_without_runtime_env_gets_the_package_alone(cluster):
    assert shipping.worker_runtime_env(Settings()) == {"py_modules": [URI]}
    assert shipping.with_package({"py_modules": [URI]}, URI) == {"py_modules": [URI]}


@pytest.mark.parametrize(
    "pkg",
    [
        "/tmp/ray/session_2026/runtime_resources/py_modules_files/_ray_pkg_ab/raytf",
        "/tmp/ray/session_2026/runtime_resources/working_dir_files/_ray_pkg_cd/raytf",
    ],
)
def test_a_package_the_job_s_runtime_env_brought_is_not_shipped_again(cluster, pkg):
    """The workers inherit the job's working_dir or py_modules: the same copy."""
    cluster["pkg"] = pkg
    assert shipping.delivered_by_ray(pkg)
    assert shipping.worker_runtime_env(Settings()) is None
    assert cluster["uploads"] == []


def test_ship_package_off_leaves_the_workers_the_job_s_environment(cluster):
    """RAYTF_SHIP_PACKAGE=0: no upload, the workers import the nodes' own raytf."""
    off = Settings.from_env({"RAYTF_SHIP_PACKAGE": "0"})
    assert off.ship_package is False and Settings().ship_package is None
    assert shipping.worker_runtime_env(off) is None
    assert cluster["uploads"] == []


def test_by_default_a_one_node_cluster_ships_nothing_and_1_ships_anyway(cluster):
    """Unset: shipped only where a worker may land on another node (the option costs
    each worker's start); RAYTF_SHIP_PACKAGE=1 ships on one node too."""
    cluster["nodes"] = 1
    assert shipping.worker_runtime_env(Settings()) is None
    on = Settings.from_env({"RAYTF_SHIP_PACKAGE": "1"})
    assert shipping.worker_runtime_env(on) == {"py_modules": [URI]}
    cluster["nodes"] = 2  # a node joined: the next attempt ships
    assert shipping.worker_runtime_env(Settings()) == {"py_modules": [URI]}


def test_other_nodes_or_an_autoscaler_are_elsewhere(monkeypatch):
    class Context:
        def get_node_id(self):
            return "head"

    monkeypatch.setattr(shipping.ray, "get_runtime_context", Context)
    monkeypatch.setattr(shipping, "autoscaler_running", lambda: False)
    monkeypatch.setattr(shipping, "alive_node_ids", lambda: {"head"})
    assert not shipping.workers_may_land_elsewhere()
    monkeypatch.setattr(shipping, "autoscaler_running", lambda: True)  # nodes may come
    assert shipping.workers_may_land_elsewhere()
    monkeypatch.setattr(shipping, "autoscaler_running", lambda: False)
    monkeypatch.setattr(shipping, "alive_node_ids", lambda: {"head", "worker-1"})
    assert shipping.workers_may_land_elsewhere()


def test_a_failed_upload_warns_once_and_leaves_the_nodes_raytf(monkeypatch, caplog):
    def refuse(pkg):
        raise RuntimeError("GCS said no")

    monkeypatch.setattr(shipping, "upload", refuse)
    monkeypatch.setattr(shipping, "package_dir", lambda: "/opt/elsewhere/raytf")
    monkeypatch.setattr(shipping, "workers_may_land_elsewhere", lambda: True)
    monkeypatch.setattr(shipping, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="raytf"):
        assert shipping.worker_runtime_env(Settings()) is None
        assert shipping.worker_runtime_env(Settings()) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "GCS said no" in lines[0] and "RAYTF_SHIP_PACKAGE=0" in lines[0]


def test_kept_processes_are_matched_by_the_shipped_content(cluster):
    """Another content is another URI, so another key: a process kept with other raytf
    code never serves the run; the same content, the same key."""
    env = {"TF_CPP_MIN_LOG_LEVEL": "1"}
    shipped = kept.env_key(env, {"py_modules": [URI]})
    assert shipped == kept.env_key(env, {"py_modules": [URI]})
    assert shipped != kept.env_key(env, {"py_modules": ["gcs://_ray_pkg_other.zip"]})
    assert shipped != kept.env_key(env, None)
    # None is the job's environment as it is, the same as an option equal to it.
    cluster["job"] = {"py_modules": [URI]}
    assert kept.env_key(env, None) == shipped


def test_bytecode_does_not_change_what_is_shipped(tmp_path):
    """The URI is the content's hash: a __pycache__ a node or the driver wrote must not
    make a new package (one upload per change of the code, not per import)."""
    from ray._private.runtime_env.packaging import get_uri_for_directory

    pkg = tmp_path / "raytf"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n")

    def uri():
        return get_uri_for_directory(str(pkg), include_gitignore=True, excludes=shipping.EXCLUDES)

    before = uri()
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\x00" * 64)
    assert uri() == before
    (pkg / "__init__.py").write_text("X = 2\n")
    assert uri() != before
