"""Variables each rank keeps its own value of, kept per rank in its checkpoint state.

Keras 3 creates layer state with ``aggregation="none"`` unless told otherwise:
``BatchNormalization``'s moving mean and variance, for one. Under MWMS such a
variable is updated by each worker from its own batches and never reduced, so
the workers hold different values (trainable weights stay equal: their
updates come from the all-reduced gradients). TensorFlow's checkpoint holds
one value per variable, the chief's; restored from it alone, every other
rank's copy would jump to the chief's, and a resumed run's validation (each
rank evaluates its shard with its own statistics) would differ from the
uninterrupted run's, silently. So each rank's own values ride in its state
file beside the TF files, and are put back after TF's restore.

Bit for bit: the bytes are kept, not decimal numbers. Bounded: past
``LIMIT_BYTES`` per rank the values are not kept (it would be every step's
cost for an emergency copy) and the run says, once, that a resume gives these
variables the chief's values.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

KEY = "raytf_rank_local"
LIMIT_BYTES = 16 << 20


def unreduced(trackables: dict) -> list:
    """The tracked Keras models' non-trainable weights that no reduction keeps equal.

    ``BatchNormalization(synchronized=True)``'s statistics are ``aggregation="none"``
    too, but each step updates them from all-reduced batch moments: equal on every
    rank, bit for bit, so the chief's values stand for every rank's."""
    import keras

    seen: set[int] = set()
    out = []
    for obj in trackables.values():
        if not isinstance(obj, keras.layers.Layer):
            continue
        layers = obj._flatten_layers()  # the model and every layer inside it
        seen |= {
            id(w)
            for layer in layers
            if getattr(layer, "synchronized", False) is True
            for w in layer.non_trainable_weights
        }
        for w in obj.non_trainable_weights:
            if getattr(w, "aggregation", None) == "none" and id(w) not in seen:
                seen.add(id(w))
                out.append(w)
    return out


def size_of(variables: list) -> int:
    return sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in variables)


class RankLocal:
    """``get`` / ``set_`` for the checkpointer's per-rank state (``add_state``)."""

    def __init__(self, variables: list):
        self.variables = variables

    def get(self) -> list:
        out = []
        for v in self.variables:
            a = np.ascontiguousarray(np.asarray(v.numpy()))
            out.append([str(a.dtype), list(a.shape), base64.b64encode(a.tobytes()).decode()])
        return out

    def set_(self, doc: Any) -> None:
        if not isinstance(doc, list) or len(doc) != len(self.variables):
            return  # another model's state (a changed model is refused before this)
        for v, (dtype, shape, data) in zip(self.variables, doc):
            if list(v.shape) != list(shape):
                return
            a = np.frombuffer(base64.b64decode(data), dtype=np.dtype(dtype)).reshape(shape)
            v.assign(a)
