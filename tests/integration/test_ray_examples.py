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
import zipfile

import pytest
import ray

from raytf.integrations.ray_train import CHECKPOINTS

from .jobrun import ROOT

pytestmark = pytest.mark.slow

EXAMPLES = pathlib.Path(ray.__file__).parent / "train" / "examples" / "tf"
RAY_TRAIN = "raytf.integrations.ray_train"
# MNIST's download: arrays of its shape and dtype, with learnable labels (the brightest of
# 10 pixels), as MNIST's are: the loss must fall.
MNIST = "(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()"
LOCAL_MNIST = (
    "x_train = np.random.default_rng(0).integers(0, 256, (60000, 28, 28), dtype=np.uint8); "
    "y_train = x_train[:, 14, :10].argmax(1).astype(np.uint8)"
)
# The regression CSV's columns (x000..x099, y: floats), made locally; y is learnable.
REGRESSION_CSV = 'dataset = ray.data.read_csv("s3://anonymous@air-example-data/regression.csv")'
LOCAL_REGRESSION = (
    "dataset = ray.data.range(1000).map(lambda r: {**{f'x{i:03}': ((r['id'] * (i + 7))"
    " % 101) / 101.0 for i in range(100)}, 'y': ((r['id'] * 7) % 101) / 50.5})"
)

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
        ("data", MNIST, LOCAL_MNIST),
    ],
    "tensorflow_quick_start.py": [
        (
            "import",
            "    from ray.train.tensorflow import TensorflowTrainer",
            f"    from {RAY_TRAIN} import TensorflowTrainer",
        ),
        (
            "import",
            "    from ray.train import ScalingConfig",
            f"    from {RAY_TRAIN} import ScalingConfig",
        ),
        ("data", MNIST, LOCAL_MNIST),
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
        ("data", REGRESSION_CSV, LOCAL_REGRESSION),
    ],
}


CHANGES["tensorflow_autoencoder_example.py"] = [
    (
        "import",
        "from ray import train",
        f"from {RAY_TRAIN.rsplit('.', 1)[0]} import ray_train as train",
    ),
    (
        "import",
        "from ray.air.integrations.keras import ReportCheckpointCallback",
        f"from {RAY_TRAIN} import ReportCheckpointCallback",
    ),
    (
        "import",
        "from ray.train import Result, ScalingConfig",
        f"from {RAY_TRAIN} import Result, ScalingConfig",
    ),
    (
        "import",
        "from ray.train.tensorflow import TensorflowTrainer, prepare_dataset_shard",
        f"from {RAY_TRAIN} import TensorflowTrainer, prepare_dataset_shard",
    ),
    # Its data: MNIST from tensorflow_datasets through Ray Data's SimpleTensorFlowDatasource,
    # which Ray 2.60 no longer has (its own import fails there). Made locally instead: what
    # get_dataset() gave, 128 rows of "image" and "label", each the same 784 floats in [0, 1].
    ("data", "import tensorflow_datasets as tfds", ""),
    ("data", "from ray.data.datasource import SimpleTensorFlowDatasource", ""),
    (
        "data",
        'train_dataset = get_dataset(split_type="train")',
        "train_dataset = ray.data.from_items([{'image': x, 'label': x} for x in "
        "np.random.default_rng(0).integers(0, 256, (128, 784)).astype(np.float32) / 255])",
    ),
]


# Ray's python/ray/train/v2/tests/test_tensorflow_trainer.py, kept as data (its SOURCE.md).
UPSTREAM = pathlib.Path(__file__).parent / "ray_upstream"
V2_TEST = "test_tensorflow_trainer.py"
CHANGES[V2_TEST] = [
    ("import", "from ray.train import ScalingConfig", f"from {RAY_TRAIN} import ScalingConfig"),
    (
        "import",
        "    from ray.train.examples.tf.tensorflow_regression_example import (",
        "    from tensorflow_regression_example import (",  # the moved example, beside it
    ),
    (
        "import",
        "    from ray.train.tensorflow import TensorflowTrainer",
        f"    from {RAY_TRAIN} import TensorflowTrainer",
    ),
    ("data", "    " + REGRESSION_CSV, "    " + LOCAL_REGRESSION),
]


def moved(name: str) -> tuple[str, dict[str, int]]:
    """The example's (or Ray test's) source with its listed lines changed, and how many
    of each kind."""
    source = (UPSTREAM / name if name == V2_TEST else EXAMPLES / name).read_text()
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


def run_alone(args: list[str], cwd: pathlib.Path, **env_vars: str) -> str:
    """``python ARGS`` in ``cwd`` with an embedded Ray of its own started there (never the
    session's cluster), as a user runs it; it must succeed. Its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(env_vars, PYTHONPATH=f"{ROOT}:{cwd}")
    proc = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=280
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout


def epoch_reports(run_dir: pathlib.Path) -> list[dict]:
    with open(run_dir / "metrics.jsonl") as f:
        records = [json.loads(line) for line in f]
    return [r["metrics"] for r in records if r.get("rank") == 0 and "loss" in r.get("metrics", {})]


def learned_with_a_checkpoint_per_epoch(run_dir: pathlib.Path, epochs: int) -> list[str]:
    """Rank 0 reported once per epoch with a falling loss, and Ray's callback stored one
    checkpoint per epoch, in order: their names."""
    reports = epoch_reports(run_dir)
    assert len(reports) == epochs, reports
    assert reports[-1]["loss"] < reports[0]["loss"]
    names = sorted(n for n in os.listdir(run_dir / CHECKPOINTS) if n.startswith("checkpoint_"))
    assert names == [f"checkpoint_{i:06d}" for i in range(epochs)]
    return names


def test_the_mnist_example_runs_with_its_imports_and_download_changed(cluster_env, tmp_path):
    """tf_keras's ``fit`` (the example sets ``TF_USE_LEGACY_KERAS=1``) with Ray's callback:
    2 epochs of 70 steps on 2 workers, a report and a ``model.keras`` checkpoint per epoch."""
    _, counts = moved("tensorflow_mnist_example.py")
    assert counts == {"import": 3, "data": 1}
    args = ["--num-workers", "2", "--epochs", "2"]
    run_dir, screen = run_example("tensorflow_mnist_example.py", args, cluster_env, tmp_path)
    names = learned_with_a_checkpoint_per_epoch(run_dir, 2)
    with open(run_dir / CHECKPOINTS / names[-1] / "model.keras", "rb") as f:
        assert f.read(2) == b"PK"  # a .keras file is a zip
    # Its own MultiWorkerMirroredStrategy() is the worker's (raytf.worker.own_strategy):
    # collective ops are not enabled a second time, so TF has nothing to warn about.
    warning = "Enabling collective ops after program startup"
    assert warning not in screen
    assert warning not in (run_dir / "logs" / "rank_1.log").read_text()


def test_the_regression_example_reads_its_shard_through_rays_data_iterator(cluster_env, tmp_path):
    """tf_keras's ``fit`` called once per epoch on ``get_dataset_shard("train").to_tf(
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


def test_the_quick_start_trains_one_process_then_four_workers(cluster_env, tmp_path):
    """Its ``__main__`` as written: ``train_func()`` in the driver (3 epochs of 70 steps),
    then ``TensorflowTrainer(train_func_distributed, ScalingConfig(num_workers=4))``: its
    own ``MultiWorkerMirroredStrategy()``, a global batch of 64 per worker read from
    ``TF_CONFIG``, tf_keras's ``fit`` with no callback. The quick start has no flags: this
    is its size."""
    _, counts = moved("tensorflow_quick_start.py")
    assert counts == {"import": 2, "data": 1}
    run_dir, screen = run_example("tensorflow_quick_start.py", [], cluster_env, tmp_path)
    assert screen.count("Epoch 3/3") >= 1  # the driver's own single-process fit
    state = json.loads((run_dir / "state.json").read_text())
    assert state["state"] == "FINISHED" and state["world_size"] == 4
    assert [w["state"] for w in state["workers"]] == ["finished"] * 4
    for rank in range(4):  # every rank trained all 3 epochs of 70 steps
        log = (run_dir / "logs" / f"rank_{rank}.log").read_text()
        assert "Epoch 3/3" in log and "70/70" in log.split("Epoch 3/3")[1], log[-2000:]


def test_the_autoencoder_reads_its_shard_through_a_generator(cluster_env, tmp_path):
    """``iter_tf_batches`` of the shard inside ``tf.data.Dataset.from_generator``, through
    ``prepare_dataset_shard``, one tf_keras ``fit`` per epoch with Ray's callback: a report
    and a checkpoint per epoch, the loss falls. Ray 2.60 itself cannot import the example
    (its data source is gone), so its data is made here."""
    from ray.data import datasource

    assert not hasattr(datasource, "SimpleTensorFlowDatasource")  # else port it as written
    _, counts = moved("tensorflow_autoencoder_example.py")
    assert counts == {"import": 4, "data": 3}
    args = ["--num-workers", "2", "--epochs", "3"]
    run_dir, _ = run_example("tensorflow_autoencoder_example.py", args, cluster_env, tmp_path)
    learned_with_a_checkpoint_per_epoch(run_dir, 3)


def test_rays_own_tensorflow_trainer_test_passes_with_its_imports_changed(tmp_path):
    """Ray's V2 ``test_tensorflow_linear`` (1 and 2 workers, its own ``ray.init(num_cpus=
    4)``, the regression example's ``train_func`` with Ray's callback, then ``not
    result.error`` and ``result.checkpoint``) run by pytest as Ray runs it."""
    source, counts = moved(V2_TEST)
    assert counts == {"import": 3, "data": 1}
    (tmp_path / V2_TEST).write_text(source)
    example, _ = moved("tensorflow_regression_example.py")
    (tmp_path / "tensorflow_regression_example.py").write_text(example)
    storage = tmp_path / "runs"
    pytest_run = ["-m", "pytest", "-q", "-p", "no:cacheprovider", V2_TEST]
    stdout = run_alone(pytest_run, tmp_path, RAYTF_STORAGE_PATH=str(storage))
    assert "2 passed" in stdout, stdout[-4000:]
    runs = sorted(storage.iterdir())
    assert len(runs) == 2, runs  # one run per parametrized case, each its own directory
    for run_dir in runs:
        assert len(epoch_reports(run_dir)) == 1  # epochs=1: one report per epoch
        assert (run_dir / CHECKPOINTS / "checkpoint_000000").is_dir()


OWN_STRATEGY_JOB = """
import json, os, sys, time

import numpy as np
import tensorflow as tf

import raytf


def loop(config):
    ctx = raytf.get_context()
    if ctx.rank == 0:
        time.sleep(3)  # the group leader late to the strategy line
    strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
    nccl = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.NCCL
    )
    try:
        tf.distribute.MultiWorkerMirroredStrategy(communication_options=nccl)
        refused = None
    except ValueError as exc:
        refused = str(exc)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    x = np.linspace(0, 1, 48, dtype="float32").reshape(-1, 1)
    model.fit(x, 2 * x + 1, batch_size=8, epochs=2, verbose=0)
    # TensorFlow's guide, from every rank: a relative directory made after a check.
    if not os.path.exists("./ckpt"):
        os.makedirs("./ckpt")
    model.save("./ckpt/ckpt-1.keras")
    return {
        "same": strategy is ctx.strategy,
        "refused": refused,
        "weights": [w.tolist() for w in model.get_weights()],
        "saved": os.path.realpath("./ckpt/ckpt-1.keras"),
    }


result = raytf.Trainer(
    loop,
    scaling_config=raytf.ScalingConfig(num_workers=3, resources_per_worker={"CPU": 0.5}),
    run_config=raytf.RunConfig(storage_path=sys.argv[1], verbose=0),
).fit()
print("RESULT " + json.dumps({"attempts": result.attempts, "path": result.path,
                              "workers": result.worker_results}))
"""


def test_a_loops_own_strategy_and_relative_writes_from_every_rank(tmp_path):
    """The shape of Ray's V2 docstring example: 3 workers, each makes
    ``tf.distribute.experimental.MultiWorkerMirroredStrategy()`` and a ``tf.keras`` model
    in its scope. With the group leader 3 s late to that line, every rank used to block in
    the first layer's variable (a second MWMS replaced each rank's collective executor
    when it got there): the loop's strategy is now the worker's own, and one asked for
    with other settings is refused at the call. Then TF's guide's relative ``./ckpt``,
    made and written by every rank: the chief's in the job's directory, each other
    rank's in its own (it used to race: FileExistsError, a half-written zip)."""
    (tmp_path / "job.py").write_text(OWN_STRATEGY_JOB)
    stdout = run_alone(["job.py", str(tmp_path / "runs")], tmp_path)
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    result = json.loads(line[len("RESULT ") :])
    assert result["attempts"] == 1
    outs = result["workers"]
    assert [o["same"] for o in outs] == [True] * 3
    assert all("communication NCCL, where this run's is RING" in o["refused"] for o in outs)
    assert outs[0]["weights"] == outs[1]["weights"] == outs[2]["weights"]  # one group
    run_dir = pathlib.Path(result["path"])
    assert [o["saved"] for o in outs] == [
        str(tmp_path / "ckpt" / "ckpt-1.keras"),
        *(str(run_dir / "workdirs" / f"rank_{r}" / "ckpt" / "ckpt-1.keras") for r in (1, 2)),
    ]
    for saved in (o["saved"] for o in outs):
        with zipfile.ZipFile(saved) as archive:
            assert archive.testzip() is None  # whole: every member's CRC holds
