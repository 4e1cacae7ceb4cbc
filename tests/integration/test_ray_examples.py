"""Ray Train's TensorFlow examples, as the installed Ray wheel ships them, on raytf.

Each example's source is read from ``ray/train/examples/tf/`` at test time and
changed only by the lines listed here, counted by kind: its import lines
(Ray's names -> ``raytf.integrations.ray_train``) and, where it downloads data,
the download (arrays of the same shape and dtype, made locally: nothing is
fetched at run time). It then runs as its own ``__main__`` with its own flags,
at smoke size, joining the session's cluster through its ``--address`` flag,
and the test reads the outcome from the run directory.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest
import ray

from raytf.integrations.ray_train import CHECKPOINTS

from .jobrun import ROOT

pytestmark = pytest.mark.slow

EXAMPLES = pathlib.Path(ray.__file__).parent / "train" / "examples" / "tf"
RAY_TRAIN = "raytf.integrations.ray_train"

# (kind, Ray's line, raytf's line) per example: the whole change.
CHANGES = {
    "tensorflow_mnist_example.py": [
        (
            "import",
            "from ray.air.integrations.keras import ReportCheckpointCallback",
            f"from {RAY_TRAIN} import ReportCheckpointCallback",
        ),
        (
            "import",
            "from ray.train import Result, RunConfig, ScalingConfig",
            f"from {RAY_TRAIN} import Result, RunConfig, ScalingConfig",
        ),
        (
            "import",
            "from ray.train.tensorflow import TensorflowTrainer",
            f"from {RAY_TRAIN} import TensorflowTrainer",
        ),
        (
            "data",
            "(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()",
            # Learnable labels (the brightest of 10 pixels), as MNIST's are: the loss must fall.
            "x_train = np.random.default_rng(0).integers(0, 256, (60000, 28, 28), dtype=np.uint8); "
            "y_train = x_train[:, 14, :10].argmax(1).astype(np.uint8)",
        ),
    ],
    "tensorflow_regression_example.py": [
        (
            "import",
            "from ray import train",
            f"from {RAY_TRAIN.rsplit('.', 1)[0]} import ray_train as train",
        ),
        (
            "import",
            "from ray.train import Result, ScalingConfig",
            f"from {RAY_TRAIN} import Result, ScalingConfig",
        ),
        (
            "import",
            "from ray.train.tensorflow import TensorflowTrainer",
            f"from {RAY_TRAIN} import TensorflowTrainer",
        ),
        (
            "import",
            "from ray.train.tensorflow.keras import ReportCheckpointCallback",
            f"from {RAY_TRAIN} import ReportCheckpointCallback",
        ),
        (
            "data",
            'dataset = ray.data.read_csv("s3://anonymous@air-example-data/regression.csv")',
            # The CSV's columns (x000..x099, y: floats), made locally; y is learnable.
            "dataset = ray.data.range(1000).map(lambda r: {**{f'x{i:03}': ((r['id'] * (i + 7))"
            " % 101) / 101.0 for i in range(100)}, 'y': ((r['id'] * 7) % 101) / 50.5})",
        ),
    ],
}


def moved(name: str) -> tuple[str, dict[str, int]]:
    """The example's source with its listed lines changed, and how many of each kind."""
    source = (EXAMPLES / name).read_text()
    counts: dict[str, int] = {}
    for kind, ray_line, raytf_line in CHANGES[name]:
        assert source.count(ray_line) == 1, f"{name} no longer has: {ray_line}"
        source = source.replace(ray_line, raytf_line)
        counts[kind] = counts.get(kind, 0) + 1
    return source, counts


def run_example(name: str, args: list[str], cluster_env: dict, tmp_path):
    """Run the moved example with its own command-line flags; its one run directory and
    what it printed."""
    source, _ = moved(name)
    script = tmp_path / name
    script.write_text(source)
    storage = tmp_path / "runs"
    env = {**os.environ, **cluster_env, "RAYTF_STORAGE_PATH": str(storage), "PYTHONPATH": ROOT}
    proc = subprocess.run(
        [sys.executable, str(script), "--address", cluster_env["RAY_ADDRESS"], *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (run_dir,) = list(storage.iterdir())
    return run_dir, proc.stdout + proc.stderr


def epoch_reports(run_dir: pathlib.Path) -> list[dict]:
    with open(run_dir / "metrics.jsonl") as f:
        records = [json.loads(line) for line in f]
    return [r["metrics"] for r in records if r.get("rank") == 0 and "loss" in r.get("metrics", {})]


def test_the_mnist_example_runs_with_its_imports_and_download_changed(cluster_env, tmp_path):
    """tf_keras's ``fit`` (the example sets ``TF_USE_LEGACY_KERAS=1``) with Ray's callback:
    2 epochs of 70 steps on 2 workers, a report and a ``model.keras`` checkpoint per epoch."""
    _, counts = moved("tensorflow_mnist_example.py")
    assert counts == {"import": 3, "data": 1}
    args = ["--num-workers", "2", "--epochs", "2"]
    run_dir, screen = run_example("tensorflow_mnist_example.py", args, cluster_env, tmp_path)
    reports = epoch_reports(run_dir)
    assert len(reports) == 2, reports
    assert reports[-1]["loss"] < reports[0]["loss"]
    names = sorted(os.listdir(run_dir / CHECKPOINTS))
    assert [n for n in names if n.startswith("checkpoint_")] == [
        f"checkpoint_{i:06d}" for i in range(2)
    ]
    with open(run_dir / CHECKPOINTS / names[-2] / "model.keras", "rb") as f:
        assert f.read(2) == b"PK"  # a .keras file is a zip
    # Its own strategy's absl warning is held back from the screen, kept in the rank logs.
    warning = "Enabling collective ops after program startup"
    assert warning not in screen
    assert warning in (run_dir / "logs" / "rank_1.log").read_text()


def test_the_regression_example_reads_its_shard_through_rays_data_iterator(cluster_env, tmp_path):
    """Keras 3's ``fit`` called once per epoch on ``get_dataset_shard("train").to_tf(
    feature_columns="x", label_columns="y", batch_size=32)`` (rows per worker, Ray's
    meaning) after a Ray Data preprocessor: 4 epochs, the loss falls."""
    _, counts = moved("tensorflow_regression_example.py")
    assert counts == {"import": 4, "data": 1}
    run_dir, _ = run_example(
        "tensorflow_regression_example.py", ["--num-workers", "2"], cluster_env, tmp_path
    )
    reports = epoch_reports(run_dir)
    assert len(reports) == 4, reports
    assert reports[-1]["loss"] < reports[0]["loss"]
