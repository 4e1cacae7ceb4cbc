"""Reading a committed checkpoint back into a fresh process: where its files are,
the per-rank RNG state, the optimizer slots that must exist before a restore, and
what a failed read means.

Three failures are told apart, since only one of them is the checkpoint's
fault: a storage error (retried with backoff, then ``CheckpointStorageError``,
an infrastructure failure), a model the checkpoint does not fit
(``CheckpointMismatchError``: the run stops and no checkpoint is touched) and
damage (``CheckpointRestoreError``: the driver marks it bad and falls back).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from raytf.checkpoint import structure as structures
from raytf.checkpoint import unbroadcast
from raytf.checkpoint.emergency import state_file_for
from raytf.checkpoint.host_copy import HostCopy, is_tf_file
from raytf.checkpoint.layout import MANIFEST, TF_PREFIX, fetch, parse_step_dirname
from raytf.errors import CheckpointMismatchError, CheckpointRestoreError, CheckpointStorageError
from raytf.rundir.storage import Storage, cause, retrying

logger = logging.getLogger("raytf")


def rng_state(raw: tuple | None = None) -> dict:
    """Python's and NumPy's global RNG state as JSON-ready lists: now, or as ``rng_raw``
    captured it (a capture is microseconds; this conversion is not, so a state kept at
    every step is converted only when it is written)."""
    py, np_state = raw or rng_raw()
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], np_state[1].tolist(), *[float(x) for x in np_state[2:]]],
    }


def rng_raw() -> tuple:
    return random.getstate(), np.random.get_state()


def set_rng_state(doc: dict) -> None:
    v, internal, gauss = doc["python"]
    random.setstate((v, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = doc["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), int(pos), int(has_gauss), cached))


SEED_STATES = "raytf_seed_states"


def with_seed_states(trackables: dict) -> dict:
    """``trackables`` plus the state of every Keras ``SeedGenerator`` its layers draw from.

    Keras 3's random layers (``Dropout``, ``RandomFlip``, ``RandomTranslation``, ...)
    draw their seeds from a seed generator whose state is a variable outside
    ``layer.weights`` and outside TensorFlow's checkpoint of the model (the generator is
    not a TF trackable). Without it a resumed run draws the masks and flips the
    uninterrupted run drew at step 0, not those of the step it resumes after: other
    weights, silently. ``layer.variables`` is Keras's documented "all layer state,
    including random seeds", so what it holds beyond ``weights`` is those states.
    """
    import keras

    seen: set[int] = set()
    states = []
    for obj in trackables.values():
        if not isinstance(obj, keras.layers.Layer):
            continue
        weights = {id(w) for w in obj.weights}
        for v in obj.variables:
            if id(v) not in weights and id(v) not in seen:
                seen.add(id(v))
                states.append(v)
    if not states or SEED_STATES in trackables:
        return trackables
    return {**trackables, SEED_STATES: states}


def build_optimizers(trackables: dict, strategy) -> None:
    """Keras 3 optimizers create their slots lazily; restoring needs them to exist."""
    import keras

    models = [t for t in trackables.values() if isinstance(t, keras.Model)]
    variables = [v for m in models for v in m.trainable_variables]
    if not variables:
        return
    # The variables' own strategy: a loop may have made its own MWMS (Ray Train scripts do).
    strategy = getattr(getattr(variables[0], "value", None), "distribute_strategy", strategy)
    for t in trackables.values():
        if isinstance(t, keras.optimizers.Optimizer) and not t.built:
            with strategy.scope(), unbroadcast.locally(strategy):  # constants: not sent
                t.build(variables)


class _AfterReadFailed(Exception):
    """``after_tf_read`` failed: not the checkpoint's fault (never marked damaged, never
    read again from storage); its cause is raised as it is."""


@dataclass
class Located:
    """Where a committed checkpoint's files are read from."""

    tf_dir: str  # the TF files
    state_dir: str  # the per-rank state files
    scratch: str | None  # a download directory to delete afterwards
    source: str  # "storage" or "host memory"
    manifest: dict


def locate(storage: Storage, host_copy: HostCopy, url: str) -> Located:
    """Where to read a committed checkpoint from, and its manifest.

    Local storage: the run directory itself. Object storage: the TF files from this
    node's host copy when the manifest names it, else everything downloaded.
    """
    src = Storage(url)
    manifest = src.read_json(MANIFEST)
    if storage.local:
        return Located(url, url, None, "storage", manifest)
    scratch = tempfile.mkdtemp(prefix="raytf-restore-")
    try:
        host = host_copy.find(os.path.basename(url.rstrip("/")), manifest)
        if host is None:
            fetch(src, scratch, manifest)
            return Located(scratch, scratch, scratch, "storage", manifest)
        fetch(src, scratch, manifest, names=[n for n in manifest["files"] if not is_tf_file(n)])
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)  # a retry makes its own
        raise
    return Located(host, scratch, scratch, "host memory", manifest)


def read_committed(
    url: str,
    *,
    storage: Storage,
    host_copy: HostCopy,
    ckpt,
    rank: int,
    structure: dict,
    apply_state: Callable[[str, dict], None],
    after_tf_read: Callable[[], None] = lambda: None,
) -> str:
    """Restore ``ckpt`` (a ``tf.train.Checkpoint``) from the committed checkpoint at
    ``url`` and hand this rank's state file to ``apply_state``; where it was read from.
    ``after_tf_read`` runs between TensorFlow's read and the state file's, where every
    rank holds the same state (``raytf.checkpoint.unbroadcast.settle``)."""
    try:
        where = retrying(lambda: locate(storage, host_copy, url), f"reading {url}")
    except (FileNotFoundError, ValueError, KeyError) as exc:  # gone files, a bad manifest
        raise CheckpointRestoreError(url, f"{type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - the store, not the checkpoint
        raise CheckpointStorageError(url, cause(exc)) from exc

    def mismatch(diff: list[str]) -> CheckpointMismatchError:
        step = parse_step_dirname(os.path.basename(url.rstrip("/")))
        return CheckpointMismatchError(storage.url(), step, diff)

    def read(tf_dir: str, state_dir: str) -> None:
        ckpt.read(os.path.join(tf_dir, TF_PREFIX)).assert_existing_objects_matched()
        try:
            after_tf_read()
        except Exception as exc:
            raise _AfterReadFailed() from exc
        name = state_file_for(rank, os.listdir(state_dir))
        with open(os.path.join(state_dir, name)) as f:
            apply_state(name, json.load(f))

    source = where.source
    try:
        saved = where.manifest.get("structure")
        diff = structures.differences(saved, structure) if saved else []
        if diff:
            raise mismatch(diff)
        try:
            read(where.tf_dir, where.state_dir)
        except Exception as exc:  # noqa: BLE001 - a damaged host copy: storage has the files
            if isinstance(exc, _AfterReadFailed) or structures.tf_mismatch(exc):
                raise
            if source != "host memory":
                raise
            logger.warning("rank %d: host copy %s unusable (%s)", rank, where.tf_dir, exc)
            shutil.rmtree(where.tf_dir, ignore_errors=True)
            try:
                retrying(
                    lambda: fetch(Storage(url), where.scratch, where.manifest), f"reading {url}"
                )
            except FileNotFoundError:
                raise
            except Exception as err:  # noqa: BLE001 - the store, not the checkpoint
                raise CheckpointStorageError(url, cause(err)) from err
            source = "storage (the host copy was damaged)"
            read(where.scratch, where.scratch)
    except (CheckpointMismatchError, CheckpointStorageError):
        raise
    except _AfterReadFailed as exc:
        raise exc.__cause__ from None
    except Exception as exc:  # noqa: BLE001 - TF's refusal, or damage
        if structures.tf_mismatch(exc):
            raise mismatch([f"TensorFlow: {exc}"]) from exc
        raise CheckpointRestoreError(url, f"{type(exc).__name__}: {exc}") from exc
    finally:
        if where.scratch:
            shutil.rmtree(where.scratch, ignore_errors=True)
    return source
