"""Variables made without MWMS's broadcast of their initial values, where a restore
overwrites them.

Under MWMS every variable made in the strategy's scope takes its initial value
from the chief through a collective broadcast, so that random initial values
agree on every rank. On a resumed attempt the restore overwrites them a moment
later. Sent, they cost each recovery of ``raytf bench checkpoints``'s 302 MB model
on 2 workers 0.69-0.85 s for Adam's slots (200 MB over loopback gRPC; made
locally: about 0.05 s) and 0.93 s (median of 20 recoveries) for the model's own
100 MB, of a 2.9 s recovery. Two uses:

- ``locally``: a restore's optimizer slots (``raytf.checkpoint.restore``): their
  initial values are constants, the same on every rank.
- ``until_restored`` / ``settle``: on a resumed attempt, every variable the loop
  makes before its restore takes its initial value on its own rank (random ones
  differ), and is held. Right after TensorFlow's read of the checkpoint (before
  any per-rank state is applied), or at the loop's first ``strategy.run`` if it
  never restores, the ranks check that they hold as many (one small sum), each
  digests every held variable the read did not write (``restored_by``: what the
  checkpoint object reaches, read from the same files on every rank), the digests
  are gathered, and only the variables the ranks disagree on are sent from the
  chief: every rank then has what the broadcast would have given it, the chief's
  values. Digesting the restored ones too cost 0.55 s of each recovery of the
  302 MB model, more than half of what skipping the broadcast saved.

What this assumes of the loop, each with its test: every rank makes the same
variables in the same order before its restore (MWMS's broadcast pairs them by
order too; a count that differs is an error at the restore, not a hang); no
training step runs before the restore or a ``strategy.run`` (a step runs through
``strategy.run``: Keras's ``fit`` and every custom MWMS loop do); a value read
before then (printed weights) may differ between ranks.
"""

from __future__ import annotations

import contextlib
import inspect
import logging

from raytf import compat

logger = logging.getLogger("raytf")

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
    create = mirrored_strategy.MirroredExtended.__dict__.get("_create_variable")
    if create is None or list(inspect.signature(create).parameters) != [
        "self",
        "next_creator",
        "kwargs",
    ]:
        return "MirroredExtended._create_variable changed"
    if "_create_variable" in cars.CollectiveAllReduceExtended.__dict__:
        return "CollectiveAllReduceExtended makes its own variables"
    # Not its source: a node without TF's .py files would say no alone, and its ranks
    # would wait in a broadcast the others skip. The pinned version says what it does.
    return None


PROBE = compat.Probe(
    "variables made without a broadcast before a restore",
    "tensorflow",
    _check,
    "they are broadcast from the chief as TensorFlow does (recovery takes longer)",
)


def enable() -> None:
    """Called once the probe passed (``raytf.worker.patches``)."""
    global _enabled
    _enabled = True


def _make_local(ext) -> None:
    """``ext`` (an MWMS's extended) makes initial values as one process's MirroredStrategy
    does: on each rank, with no collective (until its own attribute is removed)."""
    from tensorflow.python.distribute import mirrored_strategy

    setattr(ext, _ATTR, getattr(mirrored_strategy.MirroredExtended, _ATTR).__get__(ext))


@contextlib.contextmanager
def locally(strategy):
    """Within: variables made in ``strategy``'s scope take their initial values on each
    rank, as a single worker's MirroredStrategy does, with no collective."""
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars

    ext = getattr(strategy, "extended", None)
    if not _enabled or not isinstance(ext, cars.CollectiveAllReduceExtended):
        yield
        return
    before = vars(ext).get(_ATTR)
    _make_local(ext)
    try:
        yield
    finally:
        if before is None:
            delattr(ext, _ATTR)  # the class's own again
        else:
            setattr(ext, _ATTR, before)


# -- a resumed attempt: every variable until the restore -----------------------------
_HELD = "_raytf_held_variables"  # on the strategy: the variables made locally, in order
# This process's last settling: (variables held, variables sent from the chief). What a
# test reads; a log line says the same.
last_settled: tuple[int, int] | None = None


def until_restored(strategy) -> bool:
    """From now until ``settle``: variables made in ``strategy``'s scope take their
    initial values locally and are held; the loop's first ``strategy.run`` settles them
    if no restore did. False (nothing changed) where the probe failed or the strategy
    is not a multi-worker MWMS."""
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars

    ext = getattr(strategy, "extended", None)
    if not _enabled or not isinstance(ext, cars.CollectiveAllReduceExtended):
        return False
    if getattr(ext, "_num_workers", 1) < 2 or hasattr(strategy, _HELD):
        return False
    held: list = []
    setattr(strategy, _HELD, held)
    _make_local(ext)
    create = type(ext)._create_variable.__get__(ext)

    def held_create(next_creator, **kwargs):
        variable = create(next_creator, **kwargs)
        held.append(variable)
        return variable

    ext._create_variable = held_create
    run = strategy.run

    def settled_run(*args, **kwargs):
        if hasattr(strategy, _HELD):
            import tensorflow as tf

            with tf.init_scope():  # traced in a tf.function: the settling runs eagerly
                settle(strategy)
        return run(*args, **kwargs)

    strategy.run = settled_run
    return True


def _stop_holding(strategy) -> list:
    ext = strategy.extended
    for name in (_ATTR, "_create_variable"):
        vars(ext).pop(name, None)  # the class's own again: later variables are broadcast
    vars(strategy).pop("run", None)
    return vars(strategy).pop(_HELD)


def restored_by(ckpt) -> set[int]:
    """The ids of the TF variables ``ckpt`` (a ``tf.train.Checkpoint`` that was just read
    with every object matched) reaches: what the restore wrote, the same on every rank.
    A Keras 3 variable is reached as itself; its TF variable is its ``_value``."""
    import tensorflow as tf

    out = set()
    for obj in tf.train.TrackableView(ckpt).descendants():
        for v in (obj, getattr(obj, "_value", None)):
            if isinstance(v, tf.Variable):
                out.add(id(v))
    return out


def settle(strategy, restored: set[int] | None = None) -> int:
    """Make every held variable agree across ranks (the chief's value where they differ)
    and stop holding; the number of variables sent. ``restored``: ids of the variables
    a restore just wrote (``restored_by``): alike on every rank, not compared. A no-op
    when nothing is held."""
    if not hasattr(strategy, _HELD):
        return 0
    import tensorflow as tf

    global last_settled
    held = _stop_holding(strategy)
    restored = restored or set()
    rest = [v for v in held if id(v) not in restored]
    # One small sum tells whether every rank holds as many (a differing model would pair
    # other ranks' variables in the collectives below, or hang them).
    n, r = len(held), len(rest)
    sums = _sum(strategy, tf.constant([1, n, n * n, r, r * r], tf.int64)).tolist()
    world = sums[0]
    if sums[1] ** 2 != world * sums[2] or sums[3] ** 2 != world * sums[4]:
        raise RuntimeError(
            "the ranks made different numbers of variables before the restore "
            f"(this rank {n}, {sums[1]} in all over {world} ranks): every rank must "
            "build the same model"
        )
    differ = []
    if rest:
        digests = tf.stack([_digest(_own_copy(v)) for v in rest])
        by_rank = _gather(strategy, digests).reshape(-1, r)
        differ = [rest[i] for i in range(r) if len(set(by_rank[:, i].tolist())) > 1]
    if differ:
        _send_from_chief(strategy, differ)
    last_settled = (n, len(differ))
    logger.info("raytf: %d variables made before the restore, %d sent", *last_settled)
    return len(differ)


def _on_every_rank(strategy, replica_fn, tensors):
    """``replica_fn(tensors)`` run in one traced ``strategy.run`` (its collectives with
    every rank's); this rank's result. The tensors are placed on the replica's device
    first: an argument placed nowhere gives a collective no destination."""
    import tensorflow as tf

    @tf.function
    def on_replica(ts):
        return strategy.run(lambda xs: replica_fn(tf.nest.map_structure(tf.identity, xs)), (ts,))

    return strategy.experimental_local_results(on_replica(tensors))[0]


def _sum(strategy, tensor):
    """The sum over ranks of ``tensor`` (int64)."""
    import tensorflow as tf

    def total(x):
        return tf.distribute.get_replica_context().all_reduce("SUM", x)

    return _on_every_rank(strategy, total, tensor).numpy()


def _digest(variable):
    """A 62-bit fingerprint of the variable's bytes on this rank."""
    import tensorflow as tf

    data = tf.io.serialize_tensor(variable.read_value())
    return tf.strings.to_hash_bucket_fast(data, 2**62)


def _gather(strategy, tensor):
    """Every rank's ``tensor`` (int64, one dimension), concatenated in rank order."""
    import tensorflow as tf

    def gather(x):
        return tf.distribute.get_replica_context().all_gather(x, axis=0)

    return _on_every_rank(strategy, gather, tensor).numpy()


def _own_copy(variable):
    """This rank's own copy of a variable: one synchronized on read would all-reduce if
    read whole."""
    from tensorflow.python.distribute import values as values_lib

    return variable.values[0] if isinstance(variable, values_lib.DistributedVariable) else variable


def _send_from_chief(strategy, variables) -> None:
    """The chief's values of ``variables`` on every rank, bit for bit: a sum of the
    chief's bits and the others' zeros, as integers (a float sum would turn -0.0 into
    0.0; a NaN stays the chief's alone)."""
    import tensorflow as tf
    from tensorflow.python.distribute import values as values_lib

    chief = bool(strategy.extended._is_chief)
    parts = [_own_copy(v) for v in variables]

    def send(ts):
        bits = [_as_bits(t) if chief else tf.zeros_like(_as_bits(t)) for t in ts]
        return tf.distribute.get_replica_context().all_reduce("SUM", bits)

    sums = _on_every_rank(strategy, send, [p.read_value() for p in parts])
    for variable, part, value in zip(variables, parts, sums):
        components = (
            variable.values if isinstance(variable, values_lib.DistributedVariable) else [variable]
        )
        for component in components:
            component.assign(_from_bits(value, part.dtype))


_WIDTH_INT = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def _as_bits(tensor):
    """``tensor``'s bits as int64 (exact for every width up to 8 bytes)."""
    import tensorflow as tf

    if tensor.dtype == tf.bool or tensor.dtype.is_integer:
        return tf.cast(tensor, tf.int64)
    same = tf.bitcast(tensor, getattr(tf, _WIDTH_INT[tensor.dtype.size]))
    return tf.cast(same, tf.int64)


def _from_bits(bits, dtype):
    import tensorflow as tf

    if dtype == tf.bool or dtype.is_integer:
        return tf.cast(bits, dtype)
    return tf.bitcast(tf.cast(bits, getattr(tf, _WIDTH_INT[dtype.size])), dtype)
