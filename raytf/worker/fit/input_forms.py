"""What a restart gives each input form Keras's ``fit`` takes besides a ``tf.data.Dataset``.

raytf cannot skip into the middle of an epoch of these (there is no ``skip`` to
apply to a NumPy array Keras shuffles itself, a Python generator or a
``PyDataset``), so their ``fit`` checkpoints at epoch ends only. Even at an
epoch's start a resume is exact only when the input gives that epoch what it
would have given without the restart, and a restarted program builds its input
afresh:

- **arrays** (NumPy, tensors, lists or dicts of them): ``shuffle=True``
  (``fit``'s default) draws each epoch's order with TensorFlow's seed: the
  same after a restart when a seed is set (measured), else not;
- **a Python generator** (or any iterator): a new one starts at its first
  batch, where the uninterrupted run would have gone on from the last;
- **a ``keras.utils.PyDataset``**: ``shuffle=True`` draws each epoch's batch
  order from Python's ``random``; ``steps_per_epoch`` shorter than the
  dataset reads on across epochs; an ``on_epoch_end`` of its own changes it
  between epochs. Otherwise epoch ``e`` is batches ``0..len-1`` again: exact.

Each case names itself in ``InputKind.restart_note``; the worker prints it with
the place it resumed at, so a resume that is not exact never looks like one
that is. ``steps_per_epoch`` is the call's own on every resumed call.
"""

from __future__ import annotations

import inspect
from typing import Any

MID_EPOCH = "the input is {what}, not a tf.data.Dataset"


def other_input(x: Any, steps_per_epoch: int | None, shuffle: Any) -> tuple[str, str | None]:
    """``(why mid-epoch steps cannot be resumed, why an epoch start is not exact or None)``."""
    import keras

    if isinstance(x, keras.utils.PyDataset):
        return MID_EPOCH.format(what="a keras.utils.PyDataset"), _py_dataset_note(
            x, steps_per_epoch, shuffle
        )
    if inspect.isgenerator(x) or (hasattr(x, "__next__") and hasattr(x, "__iter__")):
        note = (
            "the input is a Python generator: a restart makes a new one, which yields from "
            "its first batch where the run would have gone on from its last"
        )
        return MID_EPOCH.format(what="a Python generator"), note
    if not _is_arrays(x):  # a distributed dataset, an iterable of its own...
        what = f"a {type(x).__name__}"
        note = f"the input is a {type(x).__name__}: raytf cannot tell what a restart gives"
        return MID_EPOCH.format(what=what), note
    what = f"arrays ({type(x).__name__})"
    note = None
    if shuffle and shuffle != "batch" and _tf_seed() is None:
        note = (
            "fit(shuffle=True) on arrays with no TensorFlow seed set: each epoch's order "
            "is drawn afresh, and a restart draws others (keras.utils.set_random_seed "
            "makes them the same on every run)"
        )
    elif shuffle == "batch":
        note = "fit(shuffle='batch') on arrays: the order within batches is drawn afresh"
    elif steps_per_epoch is not None:
        note = (
            f"steps_per_epoch={steps_per_epoch} on arrays: where the arrays hold more "
            "batches, Keras reads on across epochs, a restart from their first batch"
        )
    return MID_EPOCH.format(what=what), note


def _tf_seed() -> int | None:
    """TensorFlow's global seed, read without drawing an op seed (which
    ``random_seed.get_seed`` would, shifting every later draw)."""
    from tensorflow.python.eager import context

    read = getattr(context, "global_seed", None)
    return read() if callable(read) else None


def _is_arrays(x: Any) -> bool:
    """What Keras's array adapter takes: NumPy arrays, tensors, pandas objects, and lists,
    tuples or dicts of them."""
    if isinstance(x, (list, tuple)):
        return all(_is_arrays(v) for v in x)
    if isinstance(x, dict):
        return all(_is_arrays(v) for v in x.values())
    if isinstance(x, (int, float, bool)):  # a list of lists of numbers is an array too
        return True
    kind = type(x)
    return hasattr(x, "shape") or kind.__module__.split(".")[0] in ("numpy", "pandas")


def _batches(x: Any) -> int | None:
    """A PyDataset's length, or None when it has none (an infinite one)."""
    try:
        return getattr(x, "num_batches", None)
    except NotImplementedError:  # no __len__: Keras says so itself when fit reads it
        return None


def _py_dataset_note(x: Any, steps_per_epoch: int | None, shuffle: Any) -> str | None:
    import keras

    batches = _batches(x)
    if batches is None and steps_per_epoch is not None:
        return (
            "a PyDataset without an end read with steps_per_epoch: Keras reads it on across "
            "epochs, a restart reads it from its first batch"
        )
    if shuffle and batches is not None:
        return (
            "fit(shuffle=True) on a PyDataset: Keras draws each epoch's batch order from "
            "Python's random state, which a restart does not restore (pass shuffle=False)"
        )
    if steps_per_epoch is not None and batches is not None and int(steps_per_epoch) < batches:
        return (
            f"steps_per_epoch={steps_per_epoch} of a PyDataset of {batches} batches: Keras "
            "reads it on across epochs, a restart reads it from its first batch"
        )
    if type(x).on_epoch_end is not keras.utils.PyDataset.on_epoch_end:
        return (
            f"{type(x).__name__}.on_epoch_end changes the dataset between epochs: the "
            "restarted one has not run it for the epochs before the restart"
        )
    return None
