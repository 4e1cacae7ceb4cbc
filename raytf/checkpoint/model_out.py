"""A worker's share of getting the trained model out of the run.

The chief writes the model's architecture once, when the loop names its model
(so any checkpoint can later be exported), and at the end of a finished run
the ``.keras`` file (and a SavedModel when asked). Every rank runs the save:
reading variables synchronized on read (Keras metrics) is a collective under
MWMS, so the other ranks write to a scratch directory they then delete, as in
TF's multi-worker saving pattern.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any

from raytf.checkpoint.model_files import ARCHITECTURE, KERAS_FILE, MODEL_DIR, SAVED_MODEL
from raytf.rundir.storage import Storage

logger = logging.getLogger("raytf")


def keras_model(trackables: dict) -> Any | None:
    """The loop's Keras model (the one named ``model``), if it named one."""
    import keras

    model = trackables.get("model")
    return model if isinstance(model, keras.Model) else None


def write_architecture(storage: Storage, model: Any) -> None:
    """Chief only; a model that cannot be described as JSON is exported by rebuilding it."""
    try:
        text = model.to_json()
    except Exception as exc:  # noqa: BLE001 - subclassed models: no export after the fact
        logger.info("model architecture not saved (%s: %s)", type(exc).__name__, exc)
        return
    storage.write_atomic(text.encode(), MODEL_DIR, ARCHITECTURE)


def save_final(storage: Storage, model: Any, rank: int, saved_model: bool) -> None:
    """Every rank: write ``model.keras`` (and a SavedModel); only the chief's are kept."""
    scratch = tempfile.mkdtemp(prefix="raytf-model-")
    try:
        model.save(os.path.join(scratch, KERAS_FILE))
        if saved_model:
            model.export(os.path.join(scratch, SAVED_MODEL), verbose=False)
        if rank != 0:
            return
        if storage.local:
            storage.makedirs(MODEL_DIR)
        storage.upload_dir(scratch, MODEL_DIR, names=[KERAS_FILE])
        if saved_model:
            storage.upload_tree(os.path.join(scratch, SAVED_MODEL), MODEL_DIR, SAVED_MODEL)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def save_at_end(checkpointer: Any, rank: int, saved_model: bool) -> None:
    """The loop finished: save its model (a silent phase); a failed save is said, and
    the finished training kept."""
    if checkpointer.model is None:
        return
    try:
        with checkpointer.phase("saving the final model"):
            save_final(checkpointer.storage, checkpointer.model, rank, saved_model)
    except Exception as exc:  # noqa: BLE001 - the training is done: keep it, say why
        # Every rank runs the same save, so they all fail alike: no collective is left half-run.
        print(f"[raytf] rank {rank}: the model file was not written ({exc})", flush=True)
