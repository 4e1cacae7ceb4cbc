"""A loop's own ``MultiWorkerMirroredStrategy()`` is the worker's strategy.

Ray Train scripts and TensorFlow's guides make their strategy inside the loop.
raytf has made the process's MWMS before the loop runs (it must be the first TF
op), so a second one would enable collective ops a second time, and TF does that
by replacing the running server's collective executor and parameter resolver
(``GrpcServer::UpdateServerDef``). Each rank does it when its loop reaches the
line, with no barrier between ranks: a rank already through sends its first
collective (the first variable's initial-value broadcast) to the group leader's
old resolver; the leader, replaced later, waits for that rank in its new one,
and every rank blocks in the model's first layer. (Reproduced every time with
the leader 3 s late among 3 workers; a Ray Data shard set up before the line
makes such a skew.)

So inside a worker, constructing the class with the settings raytf used
(``TF_CONFIG`` as raytf set it or a resolver that says the same, and the
default communication or raytf's) returns raytf's strategy itself: one group,
one numbering of collective keys, nothing enabled twice. Other settings cannot
take effect in a process whose collectives are set up: they are an error at
the call that says what to write instead.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

_JOINED: list[Any] = []  # raytf's strategy in this process, once made


def install(strategy: Any) -> None:
    """From now on, constructing MWMS (either public name) in this process gives
    ``strategy`` when its settings are the ones ``strategy`` was made with."""
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars

    _JOINED[:] = [strategy]
    base = cars.CollectiveAllReduceStrategy
    if base.__dict__.get("_raytf_joins"):
        return
    original_init = base.__init__

    def __new__(cls, *args, **kwargs):
        if _JOINED and _joins(cls, args, kwargs):
            return _JOINED[0]
        return object.__new__(cls)

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        if _JOINED and self is _JOINED[0]:
            return  # Python calls __init__ on what __new__ returned: it is made already
        original_init(self, *args, **kwargs)

    base.__new__ = staticmethod(__new__)
    base.__init__ = __init__
    base._raytf_joins = True


def _joins(cls: type, args: tuple, kwargs: dict) -> bool:
    """True when the call asks for the strategy raytf made; raises when it asks for
    another one, which this process cannot give."""
    strategy = _JOINED[0]
    bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
    bound.apply_defaults()
    given = bound.arguments
    made = strategy.extended
    problems = []
    resolver = given.get("cluster_resolver")
    if resolver is None:
        import tensorflow as tf

        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    place = (resolver.cluster_spec().as_dict(), resolver.task_type, resolver.task_id)
    ours = (made._cluster_spec.as_dict(), made._task_type, made._task_id)
    if place != ours:
        problems.append(
            f"cluster {place[0]} as {place[1]} {place[2]}, where this worker is "
            f"{ours[1]} {ours[2]} of {ours[0]}"
        )
    impl, extra = _communication(given)
    our_impl = made._communication_options.implementation
    if impl.name not in ("AUTO", our_impl.name):
        problems.append(f"communication {impl.name}, where this run's is {our_impl.name}")
    problems += [f"{name}={value!r}" for name, value in extra.items()]
    if problems:
        raise ValueError(_refused(cls.__name__, problems))
    return True


def _communication(given: dict) -> tuple[Any, dict]:
    """The implementation asked for, and any other communication option not at its
    default (a pack size or a timeout raytf's strategy was not made with)."""
    import tensorflow as tf

    options = given.get("communication_options")
    if options is None:
        auto = tf.distribute.experimental.CommunicationImplementation.AUTO
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=given.get("communication") or auto
        )
    default = tf.distribute.experimental.CommunicationOptions()
    extra = {
        name: getattr(options, name)
        for name in ("bytes_per_pack", "timeout_seconds")
        if getattr(options, name) != getattr(default, name)
    }
    return options.implementation, extra


def _refused(name: str, problems: list[str]) -> str:
    return (
        f"{name}({', '.join(problems)}) inside a raytf worker: this process's "
        "MultiWorkerMirroredStrategy is made before the loop runs, and a second one with "
        "other settings cannot take effect here (TF would replace the collectives every rank "
        "already set up). Call it with no arguments (or use raytf.get_context().strategy): "
        "raytf's TF_CONFIG and communication (RING on CPU, NCCL on GPU) apply"
    )
