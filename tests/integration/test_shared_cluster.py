"""A shared cluster: the driver's credentials reach the workers only when the run asks,
appear in no file of the run and no screen line either way, and processes kept between
runs serve only their own scope and keep nothing of the run that started them."""

import hashlib
import os

import jobs.train_synthetic as train_synthetic
import raytf
from raytf.group import kept
from raytf.group.actors import worker_env
from raytf.rundir.storage import Storage
from raytf.tools.cli import main as cli

from .cluster_state import assert_nothing_left
from .test_kept import _imported, wait_for

CONFIG = {"steps": 16, "batch_size": 64, "seed": 9, "report_every": 4, "lr": 3e-3}
PLANTED = "raytf-planted-secret-7f3a9c"  # moto takes any credentials
WATCHED = ("AWS_SECRET_ACCESS_KEY", "RAYTF_PLANTED_A")


def loop_with_env(config):
    """The example's loop, plus what this worker's process holds of ``WATCHED`` (as
    digests: a value itself would be in the results)."""
    out = train_synthetic.train_loop(config)
    out["pid"] = os.getpid()
    out["env"] = {
        k: hashlib.sha256(os.environ[k].encode()).hexdigest() for k in WATCHED if k in os.environ
    }
    return out


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def run(storage, name, **run_config):
    return raytf.Trainer(
        loop_with_env,
        train_loop_config=CONFIG,
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(
            name=name,
            storage_path=storage,
            verbose=1,
            checkpoint_config=raytf.CheckpointConfig(checkpoint_every_steps=8),
            **run_config,
        ),
    ).fit()


def test_credentials_reach_the_workers_only_when_forwarded_and_are_written_nowhere(
    s3, ray_cluster, monkeypatch, capfd
):
    """The nodes hold their own credentials (``ray_cluster`` started with moto's); the
    driver has other ones, planted."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIARAYTFPLANTED")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", PLANTED)
    storage = f"s3://{s3.make_bucket('shared-creds')}/runs"
    own = run(storage, "own")
    forwarded = run(storage, "forwarded", forward_credentials=True)
    node_secret = digest(ray_cluster.node_secret)
    assert {r["env"]["AWS_SECRET_ACCESS_KEY"] for r in own.worker_results} == {node_secret}
    assert {r["env"]["AWS_SECRET_ACCESS_KEY"] for r in forwarded.worker_results} == {
        digest(PLANTED)
    }
    for result in (own, forwarded):  # both stored their checkpoints with what they held
        assert result.checkpoint is not None and result.checkpoint.endswith("step_000000016")
    assert cli(["status", f"{storage}/forwarded"]) == 0
    assert cli(["logs", f"{storage}/forwarded"]) == 0
    screen = "".join(capfd.readouterr())
    assert "run forwarded: FINISHED" in screen and "loss" in screen  # the screen was captured
    files = Storage(storage).fs.find(Storage(storage).root)
    assert len(files) > 20
    for path in files:
        data = Storage(storage).fs.cat_file(path)
        assert PLANTED.encode() not in data and b"AKIARAYTFPLANTED" not in data, path
    assert PLANTED not in screen and "AKIARAYTFPLANTED" not in screen


def test_kept_processes_serve_their_scope_only_and_keep_nothing_of_their_starter(
    ray_cluster, storage, monkeypatch
):
    monkeypatch.setenv("RAYTF_KEEP_SCOPE", "alice")
    # Started by a driver of alice's whose workers got a variable of its own, and her
    # credential (which the start leaves out).
    planted = {"RAYTF_PLANTED_A": "a", "AWS_SECRET_ACCESS_KEY": PLANTED}
    started = kept.start(per_node=2, idle_s=300, env={**worker_env(), **planted})
    try:
        assert started == 2
        alices = {row["pid"] for row in wait_for(lambda: _imported(2))}
        monkeypatch.setenv("RAYTF_KEEP_SCOPE", "bob")
        assert kept.listing() == []  # bob sees none of alice's
        bobs = run(storage, "bob")
        assert not {r["pid"] for r in bobs.worker_results} & alices
        monkeypatch.setenv("RAYTF_KEEP_SCOPE", "alice")
        assert {row["pid"] for row in kept.listing()} == alices  # none claimed by bob
        again = run(storage, "alice")
        assert {r["pid"] for r in again.worker_results} == alices  # served by them
        assert all("RAYTF_PLANTED_A" not in r["env"] for r in again.worker_results)
        node_secret = digest(ray_cluster.node_secret)
        assert {r["env"]["AWS_SECRET_ACCESS_KEY"] for r in again.worker_results} == {node_secret}
        assert kept.listing() == []
    finally:
        for scope in ("alice", "bob"):
            monkeypatch.setenv("RAYTF_KEEP_SCOPE", scope)
            kept.stop()
    assert_nothing_left()
