"""Optimizer slots made for a restore without MWMS's broadcast of their initial values.

Under MWMS every variable made in the strategy's scope takes its initial value
from the chief through a collective broadcast, so that random initial values
agree on every rank. A restore makes the optimizers' slots (Adam: two per
weight) before reading the checkpoint over them, and their initial values are
constants (zeros, a step counter of 0, the learning rate of the optimizer's
config): the same on every rank without being sent, and overwritten by the
restore anyway (it asserts every object it holds was matched). Sent, they cost
0.69-0.85 s of each recovery for ``raytf bench checkpoints``'s 302 MB model on
2 workers (200 MB of Adam slots over loopback gRPC; made locally: about 0.05 s).

The model's own variables are still broadcast: made by the user's code before
the restore, with random initial values, and possibly not all in the
checkpoint, they must agree whatever happens next.
"""

from __future__ import annotations

import contextlib
import inspect

from raytf import compat

_ATTR = "_get_variable_creator_initial_value"
_enabled = False


def _check() -> str | None:
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars
    from tensorflow.python.distribute import mirrored_strategy

    ext, parent = cars.CollectiveAllReduceExtended, mirrored_strategy.MirroredExtended
    if not issubclass(ext, parent):
        return "CollectiveAllReduceExtended is no longer a MirroredExtended"
    for cls in (ext, parent):
        method = cls.__dict__.get(_ATTR)
        if method is None:
            return f"{cls.__name__}.{_ATTR} is gone"
        params = list(inspect.signature(method).parameters)
        if params != ["self", "replica_id", "device", "primary_var", "kwargs"]:
            return f"{cls.__name__}.{_ATTR}{inspect.signature(method)} changed"
    # Not its source: a node without TF's .py files would say no alone, and its ranks
    # would wait in a broadcast the others skip. The pinned version says what it does.
    return None


PROBE = compat.Probe(
    "optimizer slots made without a broadcast before a restore",
    "tensorflow",
    _check,
    "they are broadcast from the chief as TensorFlow does (recovery takes longer)",
)


def enable() -> None:
    """Called once the probe passed (``raytf.worker.patches``)."""
    global _enabled
    _enabled = True


@contextlib.contextmanager
def locally(strategy):
    """Within: variables made in ``strategy``'s scope take their initial values on each
    rank, as a single worker's MirroredStrategy does, with no collective."""
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars
    from tensorflow.python.distribute import mirrored_strategy

    ext = getattr(strategy, "extended", None)
    if not _enabled or not isinstance(ext, cars.CollectiveAllReduceExtended):
        yield
        return
    before = vars(ext).get(_ATTR)
    setattr(ext, _ATTR, getattr(mirrored_strategy.MirroredExtended, _ATTR).__get__(ext))
    try:
        yield
    finally:
        if before is None:
            delattr(ext, _ATTR)  # the class's own again
        else:
            setattr(ext, _ATTR, before)
