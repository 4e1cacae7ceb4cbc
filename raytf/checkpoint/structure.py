"""What a checkpoint's models hold, by shape: a model changed between launches is told
apart from a damaged checkpoint before TensorFlow reads a byte of it.

The chief records each tracked Keras model's (and plain variable's) weights as
``[path, shape]`` in order into the manifest of every checkpoint it writes. A
restore compares them with the model it was given. Positions are compared,
not names: Keras makes names unique per process (``dense`` in one process is
``dense_2`` in another that built a model before), while the order of a
model's weights follows its layers. Optimizers are not recorded: their slots
follow the model, and TensorFlow matches the rest (a checkpoint written before
the record existed is judged from TensorFlow's own error, ``tf_mismatch``).
"""

from __future__ import annotations

from typing import Any

Structure = dict[str, list[list[Any]]]  # trackable name -> [[path, shape], ...]

# TensorFlow's words when a checkpoint's values do not fit the objects restored into
# (a shape that differs, an object the checkpoint does not hold): not damage.
_TF_MISMATCH = (
    "Received incompatible tensor with shape",
    "Some Python objects were not bound to checkpointed values",
    "Unresolved object in checkpoint",
)


def _weights(obj) -> list | None:
    import keras
    import tensorflow as tf

    if isinstance(obj, keras.layers.Layer):
        return list(obj.weights)
    if isinstance(obj, tf.Variable):
        return [obj]
    return None


def describe(trackables: dict) -> Structure:
    """Each tracked model's weights as ``[path, shape]``, in order."""
    out: Structure = {}
    for name, obj in trackables.items():
        weights = _weights(obj)
        if weights is not None:
            out[name] = [
                [getattr(w, "path", None) or w.name, [int(d) for d in w.shape]] for w in weights
            ]
    return out


def differences(saved: Structure, current: Structure) -> list[str]:
    """What differs between a checkpoint's record and this model, one line per variable
    (this model's shape against the checkpoint's); [] when they fit."""
    out = []
    for name, mine in current.items():
        theirs = saved.get(name)
        if theirs is None:
            out.append(f"{name}: in this model, not in the checkpoint")
            continue
        for i in range(max(len(mine), len(theirs))):
            have = mine[i] if i < len(mine) else None
            found = theirs[i] if i < len(theirs) else None
            if have is not None and found is not None and have[1] == found[1]:
                continue
            path = (have or found)[0]
            shape_here = tuple(have[1]) if have else "absent"
            shape_there = tuple(found[1]) if found else "absent"
            out.append(f"{path}: this model {shape_here}, the checkpoint {shape_there}")
    return out


def tf_mismatch(exc: BaseException) -> bool:
    """TensorFlow refused a restore because the objects differ, not because files are bad."""
    text = str(exc)
    return isinstance(exc, (ValueError, AssertionError)) and any(m in text for m in _TF_MISMATCH)


def all_finite(model: Any) -> bool:
    """Are the model's trainable weights all finite? One reduction, one host read: the
    driver refuses to commit a checkpoint of NaN or Inf weights. Trainable weights
    only: they are mirrored, so reading them runs no collective."""
    import tensorflow as tf

    if model is None:
        return True
    floats = [w.value for w in model.trainable_weights if tf.as_dtype(w.dtype).is_floating]
    floats = [tf.reduce_all(tf.math.is_finite(v)) for v in floats]
    return bool(tf.reduce_all(floats)) if floats else True
