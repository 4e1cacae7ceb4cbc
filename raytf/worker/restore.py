"""Reading a committed checkpoint back into a fresh process: where its files are,
the per-rank RNG state, and the optimizer slots that must exist before a restore."""

from __future__ import annotations

import os
import random
import tempfile

import numpy as np

from raytf.rundir.checkpoints import MANIFEST
from raytf.rundir.storage import Storage
from raytf.worker.host_copy import HostCopy, is_tf_file


def rng_state() -> dict:
    py = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], np_state[1].tolist(), *[float(x) for x in np_state[2:]]],
    }


def set_rng_state(doc: dict) -> None:
    v, internal, gauss = doc["python"]
    random.setstate((v, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = doc["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), int(pos), int(has_gauss), cached))


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
            with strategy.scope():
                t.build(variables)


def locate(storage: Storage, host_copy: HostCopy, url: str) -> tuple[str, str, str | None, str]:
    """Where to read a committed checkpoint from: (the TF files' directory, the state
    files' directory, a scratch directory to delete afterwards, where they came from).

    Local storage: the run directory itself. Object storage: the TF files from this
    node's host copy when the manifest names it, else everything downloaded.
    """
    if storage.local:
        return url, url, None, "storage"
    scratch = tempfile.mkdtemp(prefix="raytf-restore-")
    src = Storage(url)
    manifest = src.read_json(MANIFEST)
    host = host_copy.find(os.path.basename(url.rstrip("/")), manifest)
    if host is None:
        src.download_dir(scratch)
        return scratch, scratch, scratch, "storage"
    src.download_dir(scratch, names=[n for n in manifest["files"] if not is_tf_file(n)])
    return host, scratch, scratch, "host memory"
