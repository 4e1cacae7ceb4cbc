"""The documentation's Python examples, run as written at smoke size on the session's cluster.

Each block that starts a raytf run is executed in the order of ``EXAMPLE_PAGES`` in one
namespace (the Session example uses the KerasTrainer example's ``build_model`` and
``dataset_fn``), with only what the pages leave to the reader supplied (``make_model``,
``make_dataset``, ``N``) and its sizes cut down; every other Python block of the site and
the README must at least parse, and the README's one example is the MWMS page's. A change
that breaks an example fails here.
"""

import ast
import json
import os
import re

import pytest

from tests.unit.test_readme import PAGES, README

# The pages whose examples start runs, in the order they run (names defined on one are
# used by the next: the session takes KerasTrainer's functions).
EXAMPLE_PAGES = [
    "getting-started/quickstart.md",
    "getting-started/from-mwms.md",
    "guides/keras-trainer.md",
    "guides/session.md",
]

# The tutorial: every Python block of it runs, in order (test_the_tutorial_runs_top_to_bottom).
TUTORIAL = "getting-started/tutorial.md"
# The tracking page's first block, its TensorBoard tracker (the MLflow one needs MLflow).
TRACKING = "guides/tracking.md"

# What the README leaves to the reader, defined in the examples' own namespace so that
# the workers receive them by value.
HELPERS = """
import keras
import tensorflow as tf

import raytf

N = 2


def make_model():
    from raytf.data.synthetic import NUM_CLASSES, NUM_FEATURES

    keras.utils.set_random_seed(0)  # the same start every run: the loss curve is a fixture
    return keras.Sequential([
        keras.Input((NUM_FEATURES,)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(NUM_CLASSES, activation="softmax"),
    ])


def make_dataset():
    from raytf.data.synthetic import make_dataset as synthetic

    x, y = synthetic(0, num_examples=512)
    return tf.data.Dataset.from_tensor_slices((x, y))
"""
# README size -> smoke size (the runs, not the code).
SMOKE = [('"steps": 256', '"steps": 64'), ("epochs=5", "epochs=2"), ("steps=50", "steps=8")]
RUNS = ("raytf.Trainer(", "raytf.KerasTrainer(", "raytf.Session(")


def _blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def python_blocks() -> list[str]:
    """The example pages' Python blocks, in the order they run."""
    return [block for name in EXAMPLE_PAGES for block in _blocks(PAGES[name])]


def test_every_python_block_parses():
    blocks = [b for text in [README, *PAGES.values()] for b in _blocks(text)]
    assert len(blocks) >= 10
    for block in blocks:
        ast.parse(block)


def test_the_readmes_example_is_the_one_run():
    (example,) = _blocks(README)
    assert example in python_blocks()


def _finished_runs(storage: str) -> dict[str, str]:
    out = {}
    for name in os.listdir(storage):
        path = os.path.join(storage, name, "state.json")
        if os.path.exists(path):
            with open(path) as f:
                out[name] = json.load(f)["state"]
    return out


@pytest.mark.timeout(400)
def test_the_examples_run_as_written(ray_cluster, storage, monkeypatch):
    monkeypatch.setenv("RAYTF_STORAGE_PATH", storage)  # where runs without storage_path go
    ns: dict = {"__name__": "readme_examples"}
    exec(HELPERS, ns)
    ran = []
    for block in python_blocks():
        if not any(run in block for run in RUNS):
            continue
        for size, smoke in SMOKE:
            block = block.replace(size, smoke)
        block = block.replace('"/shared/runs"', repr(storage))
        if "raytf.Session(" in block:
            ns["val_fn"] = ns["dataset_fn"]  # the README's validation input: any dataset_fn
        before = set(_finished_runs(storage))
        ns.pop("result", None)
        exec(compile(block, "docs example", "exec"), ns)
        new = {k: v for k, v in _finished_runs(storage).items() if k not in before}
        ran.append((block, ns.get("result"), new))

    assert len(ran) == 4, [b[:60] for b, _, _ in ran]
    (_, custom, _), (_, _, fit_runs), (_, keras_result, _), (_, _, session_runs) = ran
    # The custom loop: every step ran on 2 workers and the loss fell by a clear margin. The
    # example is seeded, so its curve is the same every run: measured 1.482 -> 0.725 (0.49
    # of the first report) here, twice; 0.6 leaves room for another CPU's rounding only.
    losses = [m["loss"] for m in custom.metrics_history]
    assert custom.metrics["step"] == 64 and losses[-1] < 0.6 * losses[0], losses
    assert custom.worker_results == [{"anything": "picklable"}] * 2
    # TF's model.fit idiom: a run of its own that finished.
    assert list(fit_runs.values()) == ["FINISHED"]
    # KerasTrainer: Keras's history, one entry per epoch, loss falling. ``make_model`` is
    # seeded: measured 1.851 -> 1.771 (0.957) here, twice, at 8 steps an epoch.
    history = keras_result.history
    assert len(history["accuracy"]) == 2
    assert history["loss"][1] < 0.98 * history["loss"][0], history["loss"]
    # The session: its weights on the driver, its checkpoint committed in "explore".
    assert [w.shape for w in ns["weights"]] == [(32, 16), (16,), (16, 4), (4,)]
    assert "explore" in session_runs
    assert os.listdir(os.path.join(storage, "explore", "checkpoints"))
    # What the runs left is what the run-directory page lists, checkpoints named as it says.
    layout = PAGES["reference/run-directory.md"]
    for run in os.listdir(storage):
        for entry in os.listdir(os.path.join(storage, run)):
            assert f"`{entry}" in layout, (run, entry)
        checkpoints = os.path.join(storage, run, "checkpoints")  # a loop that named nothing
        for step in os.listdir(checkpoints) if os.path.isdir(checkpoints) else []:
            assert re.fullmatch(r"step_\d{9}|scores\.json|\.staging", step), step


@pytest.mark.timeout(400)
def test_the_tutorial_runs_top_to_bottom(ray_cluster, storage):
    """docs/getting-started/tutorial.md, every Python block in order in one namespace, as
    a reader pastes them: the digits, the model, a run on 2 workers with rank 1 SIGKILLed
    from outside at step 100 of 276, the resume, the final model loaded and evaluated."""
    blocks = _blocks(PAGES[TUTORIAL])
    assert len(blocks) == 5
    ns: dict = {"__name__": "tutorial"}  # its functions travel to the workers by value
    for block in blocks:
        block = block.replace('"/shared/runs"', repr(storage))
        exec(compile(block, "tutorial", "exec"), ns)
    result = ns["result"]
    # The kill landed while it trained, cost one attempt, and the run finished all 12
    # epochs anyway (state.json: FINISHED at the last of 12 x 23 steps).
    assert not ns["killer"].is_alive()
    assert result.attempts == 2 and "worker_died" in result.failures[0], result.failures
    with open(os.path.join(storage, "digits", "state.json")) as f:
        state = json.load(f)
    assert state["state"] == "FINISHED" and state["last_step"] == 276, state["last_step"]
    assert len(result.recoveries_s) == 1
    # The model the run wrote, evaluated on the 360 digits it never saw: a small CNN
    # reaches about 0.97 here; 0.9 is far from chance (0.1) and from a broken resume.
    assert ns["accuracy"] > 0.9, ns["accuracy"]
    assert result.metrics["epoch"] == 12, result.metrics  # Keras counts from 1


def test_the_tracking_recipe_writes_each_report_to_tensorboard(storage, tmp_path):
    """docs/guides/tracking.md's TensorBoard tracker as written, in local mode: every
    report of rank 0 is a scalar at its step, and the run's end is in the log."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    block = _blocks(PAGES[TRACKING])[0]
    block = block.replace('"/shared/runs"', repr(storage))
    block = block.replace('"/shared/tensorboard"', repr(str(tmp_path / "tb")))
    ns: dict = {"__name__": "tracking"}
    exec(compile(block, "tracking", "exec"), ns)
    assert ns["result"].metrics == {"step": 50, "loss": 1 / 50}
    events = EventAccumulator(str(tmp_path / "tb" / "exp2"))
    events.Reload()
    loss = [(e.step, round(e.value, 6)) for e in events.Scalars("loss")]
    assert loss == [(s, round(1 / s, 6)) for s in range(5, 51, 5)]
    assert "end/text_summary" in events.Tags()["tensors"], events.Tags()
