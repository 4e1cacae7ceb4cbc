"""What a worker's output shows on the driver's screen, and what reaches the run directory."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from raytf.config import LoggingConfig
from raytf.errors import ConfigError
from raytf.group.actors import worker_env
from raytf.worker.process.output import tf_level
from raytf.worker.process.output_pump import is_startup_noise

pytestmark = pytest.mark.unit

# Printed by a CPU-only TF 2.21 worker on this machine, before TF reads its log level.
STARTUP = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1796410071.845559    5867 port.cc:153] oneDNN custom operations are on.",
    "I0000 00:00:1796410071.846495    5867 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.",
    "I0000 00:00:1796409675.379899   30638 cpu_feature_guard.cc:227] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild "
    "TensorFlow with the appropriate compiler flags.",
    "W0000 00:00:1796410076.336455    5867 dataset.cc:997] Input of GeneratorDatasetOp::Dataset "
    "will not be optimized because the dataset does not implement AsGraphDefInternal()",
]
CUINIT = (
    "E0000 00:00:1796410075.793135    5867 cuda_platform.cc:52] failed call to cuInit: "
    "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)"
)


def test_tf_startup_notes_are_hidden_at_raytfs_default_level_and_shown_at_0():
    assert all(is_startup_noise(line, tf_level=1, has_gpus=False) for line in STARTUP)
    assert not any(is_startup_noise(line, tf_level=0, has_gpus=False) for line in STARTUP)


def test_cuinit_failure_is_noise_on_a_cpu_worker_and_an_error_on_a_gpu_worker():
    assert is_startup_noise(CUINIT, tf_level=1, has_gpus=False)
    assert not is_startup_noise(CUINIT, tf_level=1, has_gpus=True)
    assert is_startup_noise(CUINIT, tf_level=3, has_gpus=True)  # level 3 hides errors


def test_the_users_lines_and_real_tf_warnings_pass():
    warning = "W1204 18:47:56.123456    5867 collective_ops.cc:12] Collective timed out"
    for line in ("epoch 1 loss 0.3", "Traceback (most recent call last):", warning):
        assert not is_startup_noise(line, tf_level=1, has_gpus=False)
    assert is_startup_noise(warning, tf_level=2, has_gpus=False)


def test_the_users_logging_variables_reach_the_workers_but_never_tf_config():
    env = worker_env(
        {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_CONFIG": "{}", "NCCL_DEBUG": "INFO", "HOME": "/x"}
    )
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "2" and env["NCCL_DEBUG"] == "INFO"
    assert "TF_CONFIG" not in env and "HOME" not in env
    assert worker_env({})["TF_CPP_MIN_LOG_LEVEL"] == "1"  # raytf's default
    assert tf_level({"TF_CPP_MIN_LOG_LEVEL": "3"}) == 3 and tf_level({}) == 0


def test_logging_config_carries_its_levels_and_names_a_bad_value():
    assert LoggingConfig().worker_env() == {}
    env = LoggingConfig(log_level="debug", tf_log_level=0).worker_env()
    assert env == {"RAYTF_WORKER_LOG_LEVEL": "DEBUG", "TF_CPP_MIN_LOG_LEVEL": "0"}
    with pytest.raises(ConfigError, match="log_level = 'LOUD'"):
        LoggingConfig(log_level="LOUD")
    with pytest.raises(ConfigError, match="tf_log_level = 5"):
        LoggingConfig(tf_log_level=5)


NOTE = "I0000 00:00:1796410071.845559    5867 port.cc:153] oneDNN custom operations are on."


def run_tapped(body: str, tmp_path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``body`` in a fresh process whose output goes through an ``OutputTap`` (raytf's
    default TF level, 1); returns the process and the lines the tap kept."""
    kept = tmp_path / "kept.json"
    script = textwrap.dedent(
        f"""
        import json, os, sys, time
        from raytf.worker.process.output import OutputTap
        tap = OutputTap()
        def keep():
            time.sleep(0.3)
            open({str(kept)!r}, "w").write(json.dumps(tap.drain()))
        """
    ) + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "TF_CPP_MIN_LOG_LEVEL": "1"}
    cmd = [sys.executable, "-c", script]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    return proc, json.loads(kept.read_text()) if kept.exists() else []


def test_the_tap_keeps_every_line_and_shows_only_what_the_level_allows(tmp_path):
    """C-level writes to fd 2 and Python prints both go through the pumps; a settings
    line changes what is shown from that point on, and is itself neither shown nor kept."""
    proc, kept = run_tapped(
        f"""
        print("one", flush=True)
        os.write(2, b"{NOTE}\\n")
        print("two", file=sys.stderr, flush=True)
        tap.settings(tf_level=0, has_gpus=False)
        os.write(2, b"{NOTE} again\\n")
        keep()
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "one\n"
    assert proc.stderr == f"two\n{NOTE} again\n"
    assert kept == ["one", NOTE, "two", f"{NOTE} again"]


def test_what_a_dying_worker_wrote_last_still_reaches_the_screen(tmp_path):
    """TF's fatal CHECK prints, then aborts: the pump, a process of its own, drains it."""
    proc, _ = run_tapped(
        """
        os.write(2, b"F0000 00:00:1.0  1 op.cc:1] Check failed: the last words\\n")
        os.abort()
        """,
        tmp_path,
    )
    assert proc.returncode != 0
    assert "Check failed: the last words" in proc.stderr
