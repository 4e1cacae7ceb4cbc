"""What an operator sees of a run: Ray's metrics endpoint, the run's event log, TensorBoard,
each rank's output and ``raytf status``; one real run on the session's cluster."""

import json
import logging
import threading
import time
import urllib.request

import pytest
import ray

import jobs.train_synthetic as train_synthetic
import raytf
from raytf.rundir.run_log import read_run_log
from raytf.tools.cli import main as cli
from raytf.tools.runs import read_state

pytestmark = pytest.mark.integration


def metrics_url() -> str:
    """The Prometheus endpoint of the node this driver (the test process) runs on."""
    here = ray.get_runtime_context().get_node_id()
    node = next(n for n in ray.nodes() if n["NodeID"] == here)
    return f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"


class Scraper(threading.Thread):
    """Reads the endpoint while the run trains; keeps raytf's samples of this run."""

    def __init__(self, url: str, run: str):
        super().__init__(daemon=True)
        self.url, self.run_name, self.seen = url, run, {}
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                body = urllib.request.urlopen(self.url, timeout=2).read().decode()
            except OSError:
                body = ""
            for line in body.splitlines():
                if line.startswith("ray_raytf_") and f'run="{self.run_name}"' in line:
                    name = line.split("{", 1)[0]
                    if name == "ray_raytf_metric":
                        name += ":" + line.split('name="', 1)[1].split('"', 1)[0]
                    self.seen[name] = float(line.rsplit(" ", 1)[1])
            self.done.wait(0.3)


def loop_telling_its_log_settings(config):
    import logging
    import os

    out = train_synthetic.train_loop(config)
    env = {k: os.environ.get(k) for k in ("TF_CPP_MIN_LOG_LEVEL", "NCCL_DEBUG")}
    return dict(out, env=env, root_level=logging.getLogger().level)


def test_prometheus_event_log_tensorboard_rank_logs_and_status(
    ray_cluster, storage, capsys, monkeypatch
):
    monkeypatch.setenv("NCCL_DEBUG", "WARN")  # the driver's logging variables reach workers
    scraper = Scraper(metrics_url(), "obs")
    trainer = raytf.Trainer(
        loop_telling_its_log_settings,
        train_loop_config={
            "steps": 96,
            "batch_size": 64,
            "seed": 1,
            "report_every": 4,
            "lr": 3e-3,
            "step_sleep": 0.03,
        },  # fmt: skip
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(
            name="obs",
            storage_path=storage,
            verbose=0,
            checkpoint_config=raytf.CheckpointConfig(checkpoint_every_steps=32),
            logging_config=raytf.LoggingConfig(log_level="WARNING", tf_log_level=2),
        ),
    )
    scraper.start()
    try:
        result = trainer.fit()
        running = dict(scraper.seen)  # what the endpoint served while the run trained
    finally:
        scraper.done.set()
        scraper.join()
    for out in result.worker_results:
        assert out["env"] == {"TF_CPP_MIN_LOG_LEVEL": "2", "NCCL_DEBUG": "WARN"}
        assert out["root_level"] == logging.WARNING
    # Ray's endpoint served raytf's figures and the reported metrics during the run.
    for name in ("ray_raytf_step", "ray_raytf_attempt", "ray_raytf_metric:loss"):
        assert name in running, sorted(running)
    assert 0 < running["ray_raytf_step"] <= 96
    assert (
        "ray_raytf_step_time_seconds" in running and "ray_raytf_checkpoint_age_seconds" in running
    )

    # The event log holds every report of every rank, the commits, the total and the end.
    records = read_run_log(result.path)
    reports = [r for r in records if r["type"] == "report"]
    assert [r["metrics"] for r in reports if r["rank"] == 0] == result.metrics_history
    assert sorted({r["rank"] for r in reports}) == [0, 1]
    assert [r["step"] for r in records if r["type"] == "checkpoint"] == [32, 64, 96]
    assert [r["value"] for r in records if r["type"] == "total_steps"] == [96]
    assert records[-1]["type"] == "end" and records[-1]["state"] == "FINISHED"

    # TensorBoard: every report's loss, at its step, written without TF on the driver's side.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(f"{result.path}/tensorboard")
    events.Reload()
    losses = [(e.step, round(e.value, 5)) for e in events.Scalars("loss")]
    assert losses == [(m["step"], round(m["loss"], 5)) for m in result.metrics_history]

    # Each rank's output is in the run directory, TF's start-up notes included.
    capsys.readouterr()
    assert cli(["logs", result.path, "--rank", "1"]) == 0
    rank1 = capsys.readouterr().out
    assert "--- attempt 1" in rank1 and "absl::InitializeLog" in rank1

    # status: a person's view, and for scripts exactly the JSON of read_state.
    assert cli(["status", result.path]) == 0
    human = capsys.readouterr().out
    assert "FINISHED" in human and "96" in human and "127.0.0.2" in human
    assert cli(["status", result.path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == read_state(result.path)
    assert cli(["runs", storage]) == 0
    listing = capsys.readouterr().out
    assert "obs" in listing and "FINISHED" in listing
    assert time.time() - read_state(result.path)["updated"] < 120


def test_a_jobs_screen_shows_no_tf_startup_notes_and_each_progress_line_once(reference):
    """The fault tests' reference job, as its user saw it (driver and forwarded worker
    output): before, every rank printed TF's start-up notes twice and, on this CPU-only
    machine, a CUDA error; its full output stays in the run's logs/."""
    screen = reference["output"]
    for note in ("cuInit", "CUDA error", "oneDNN", "absl::InitializeLog", "cuda drivers"):
        assert note not in screen, note
    # Each line's last field is the time it was drawn: a report printed twice differs there.
    progress = [line.rsplit("|", 1)[0] for line in screen.splitlines() if "[raytf] step " in line]
    assert progress and len(progress) == len(set(progress)), progress
