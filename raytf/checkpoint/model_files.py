"""The trained model's files in a run directory, and reading them back on any machine.

``model/architecture.json`` is written by the chief when the loop names its
model (``ctx.restore(model=...)``): with it, any committed checkpoint becomes
a model file after the fact (``raytf export``). ``model/model.keras`` (and
``model/saved_model/`` when ``CheckpointConfig(export_saved_model=True)``)
are written at the end of a run that finished. Nothing here needs a worker:
the driver or a laptop loads them with Keras alone.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from raytf.checkpoint.layout import (
    CKPT_DIR,
    MANIFEST,
    TF_PREFIX,
    committed,
    fetch,
    step_dirname,
)
from raytf.rundir.storage import Storage

MODEL_DIR = "model"
ARCHITECTURE = "architecture.json"
KERAS_FILE = "model.keras"
SAVED_MODEL = "saved_model"
FORMATS = ("keras", "saved_model")


def _model_from_checkpoint(storage: Storage, step: int | None) -> tuple[Any, int]:
    import keras
    import tensorflow as tf

    steps = committed(storage)
    if not steps:
        raise FileNotFoundError(f"{storage.root}: no committed checkpoint")
    step = steps[-1] if step is None else int(step)
    if step not in steps:
        raise FileNotFoundError(f"{storage.root}: no committed checkpoint at step {step} ({steps})")
    if not storage.exists(MODEL_DIR, ARCHITECTURE):
        raise FileNotFoundError(
            f"{storage.root}: no {MODEL_DIR}/{ARCHITECTURE}: the loop never named a Keras "
            "model with ctx.restore(model=...), or its model cannot be described as JSON "
            "(a subclassed model: rebuild it yourself and tf.train.Checkpoint(model=m).read(...))"
        )
    with storage.fs.open(storage.path(MODEL_DIR, ARCHITECTURE), "r") as f:
        model = keras.models.model_from_json(f.read())
    with tempfile.TemporaryDirectory(prefix="raytf-export-") as scratch:
        step_dir = Storage(storage.url(CKPT_DIR, step_dirname(step)))
        fetch(step_dir, scratch, step_dir.read_json(MANIFEST))
        status = tf.train.Checkpoint(model=model).read(os.path.join(scratch, TF_PREFIX))
        status.expect_partial()  # the optimizer and raytf's step counter stay behind
    return model, step


def load_model(run_dir: str, step: int | None = None) -> Any:
    """The run's Keras model: the final ``model.keras``, or the weights of checkpoint ``step``."""
    import keras

    storage = Storage(run_dir)
    if step is None and storage.exists(MODEL_DIR, KERAS_FILE):
        with tempfile.TemporaryDirectory(prefix="raytf-load-") as scratch:
            local = os.path.join(scratch, KERAS_FILE)
            storage.fs.get_file(storage.path(MODEL_DIR, KERAS_FILE), local)
            return keras.models.load_model(local)
    return _model_from_checkpoint(storage, step)[0]


def export(run_dir: str, out: str, *, step: int | None = None, fmt: str = "keras") -> int:
    """Write checkpoint ``step`` (default: the latest) as a ``.keras`` file or a SavedModel
    at the local path ``out``; returns the step written."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: use one of {FORMATS}")
    model, step = _model_from_checkpoint(Storage(run_dir), step)
    if fmt == "keras":
        model.save(out)
    else:
        model.export(out, verbose=False)
    return step
