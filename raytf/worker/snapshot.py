"""Asynchronous checkpoints: a consistent copy of the state in host memory, written later.

At the agreed step every rank gathers what its ``tf.train.Checkpoint`` would
save (TF's own object graph and checkpoint keys, so the files are ordinary TF
checkpoint files that ``Checkpoint.read`` restores) and takes each value with
``tf.identity``: a reference to the variable's current buffer on the host. A
TF resource variable is copy-on-write: the next in-place update of a variable
whose buffer is still referenced copies it first, so the snapshot stays the
state at the agreed step while training goes on, and costs one memcpy per
variable, paid by the next step, instead of a file write in the loop.
Measured on a 2048-wide MLP with Adam (101 MB of state, this machine): the
snapshot 30 ms against 150 ms for the traced synchronous write; restored
bit-identical after two more training steps had changed every variable.

The files are written from the snapshot on another thread by TF's own
``MultiDeviceSaver``. TF's ``experimental_enable_async_checkpoint`` does not
serve here: it copies Keras 3 variables by creating ``tf.Variable``s inside a
``tf.function`` (``keras.Variable._copy_trackable_to_cpu``), which fails.

TF internals used, pinned by the ``tensorflow==2.21.*`` requirement and held
by the unit test that restores a snapshot after training moved on:
``TrackableSaver._gather_serialized_tensors`` and ``MultiDeviceSaver``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass
class Snapshot:
    tensors: Any  # trackable -> {checkpoint key: tensor or {slice: tensor}}
    registered_savers: Any


def _freeze(value):
    import tensorflow as tf
    from tensorflow.python.training.saving import saveable_object

    if isinstance(value, dict):
        return {k: _freeze(v) for k, v in value.items()}
    tensor = value.tensor if isinstance(value, saveable_object.SaveSpec) else value
    if callable(tensor) and not isinstance(tensor, tf.Tensor):
        tensor = tensor()  # TF reads a variable lazily, at write time: read it now
    if tensor.dtype == tf.string:
        return tensor  # the object graph proto: a constant already
    with tf.device("/cpu:0"):
        return tf.identity(tensor)


def take(ckpt) -> Snapshot:
    """The state ``ckpt`` holds, now. Every rank calls it at the same step: reading a
    variable synchronized on read (Keras metrics) all-reduces across the group."""
    from tensorflow.python.util import object_identity

    serialized, _, registered, _ = ckpt._saver._gather_serialized_tensors(None)
    frozen = object_identity.ObjectIdentityDictionary()
    for obj, tensors in serialized.items():
        frozen[obj] = {key: _freeze(v) for key, v in tensors.items()}
    return Snapshot(frozen, registered)


def write(snapshot: Snapshot, prefix: str) -> None:
    """Write the snapshot as TF checkpoint files at ``prefix`` (a local path); any thread."""
    import tensorflow as tf
    from tensorflow.python.checkpoint import functional_saver

    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    saver = functional_saver.MultiDeviceSaver(snapshot.tensors, snapshot.registered_savers)
    saver.save(tf.constant(prefix))
