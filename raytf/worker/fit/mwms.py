"""Keras 3's own ``fit`` / ``evaluate`` / ``predict`` under multi-worker MWMS.

Why they fail (keras-team/keras#20585, ray-project/ray#47464), found by
running them on two MWMS processes with Keras 3.15 and TF 2.21:

1. At the start of ``fit`` and ``evaluate``, Keras's TF trainer builds the
   model symbolically from the first batch (``_maybe_symbolic_build``). To
   turn a distributed batch into a plain one it calls
   ``strategy.reduce("MEAN", batch, axis=None)`` on the whole ``(x, y)``
   structure. ``tf.distribute.Strategy.reduce`` does not take a nest (TF's own
   ``TODO: support value being a nest``); with one worker the structure slips
   through a local path, but with several MWMS sends it to the collective
   all-reduce, which calls ``convert_to_tensor`` on the tuple of ``PerReplica``
   values: the ``ValueError`` that prints the whole input batch. Only shapes and
   dtypes are needed there, so this module gives Keras the local replica's
   values instead: no collective, no error.
2. After each step Keras reduces the step's outputs (loss and metric results,
   scalars) with ``reduction="auto"`` -> ``"mean"``, which in multi-worker mode
   is ``strategy.reduce("MEAN", v, axis=0)``: ``axis=0`` on a scalar fails to
   trace (``Invalid reduction dimension 0 for input with 0 dimensions``). This
   module reduces them across workers with ``axis=None`` (a mean over
   replicas), which is what "mean" means for one value per replica.

Epoch-end and ``evaluate`` figures are global either way: Keras reads its
metric variables (synchronized on read, summed) in cross-replica context,
which all-reduces them over every worker. ``predict`` needed no change (its
``concat`` reduction gathers every worker's outputs in order).

``jit_compile=True`` cannot work on CPU workers (XLA compiles only NCCL
collectives; theirs are gRPC ring ones): refused at the call, with what to use.
``steps_per_execution > 1`` still cannot work: Keras runs the steps in a
``tf.while_loop`` whose conditional holds the collectives, and the graph fails
with ``You must feed a value for placeholder tensor ...``; ``fit`` refuses it up
front with what to use instead.

The patch is narrow: two wrappers around Keras's functions, delegating to
them, installed only inside raytf workers (``install`` is called by the worker
actor), only for the Keras release raytf supports (``raytf.compat``), and only
after checking that the installed Keras still has the code it works around
(``PROBE``, run at worker start; ``tests/unit/test_keras_fit.py`` fails when
Keras changes under it).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from raytf.compat import Probe, version_note

logger = logging.getLogger("raytf")

# What the patched functions must still contain for the patch to apply.
_SYMBOLIC_BUILD_MARKER = "self.distribute_strategy.reduce("
_REDUCE_MARKER = 'strategy.reduce("MEAN", v, axis=0)'

_installed = False


class KerasMultiWorkerError(ValueError):
    """A Keras 3 feature that cannot run under multi-worker MWMS, and what to use instead."""


def _trainer_module():
    from keras.src.backend.tensorflow import trainer

    return trainer


def why_not_patchable() -> str | None:
    """None when the installed Keras is the release this patch was checked against and
    still has the code it works around, else why not."""
    wrong_version = version_note("keras")
    if wrong_version is not None:
        return wrong_version
    module = _trainer_module()
    build = getattr(module.TensorFlowTrainer, "_maybe_symbolic_build", None)
    reduce_fn = getattr(module, "reduce_per_replica", None)
    if build is None or reduce_fn is None:
        return "Keras's TF trainer no longer has _maybe_symbolic_build / reduce_per_replica"
    if _SYMBOLIC_BUILD_MARKER not in inspect.getsource(build):
        return "Keras's _maybe_symbolic_build no longer reduces the first batch"
    if _REDUCE_MARKER not in inspect.getsource(reduce_fn):
        return "Keras's reduce_per_replica no longer reduces along axis 0 across workers"
    return None


PROBE = Probe(
    "Keras 3's own model.fit under multi-worker MWMS (keras#20585 workaround)",
    "keras",
    why_not_patchable,
    "Keras's model.fit is left unpatched and may fail with several workers; "
    "raytf.KerasTrainer is not affected",
)


def _is_multi_worker(strategy: Any) -> bool:
    return bool(_trainer_module()._collective_all_reduce_multi_worker(strategy))


def _local_values(strategy: Any, batch: Any) -> Any:
    import tensorflow as tf

    def local(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(value)[0]
        return value

    return tf.nest.map_structure(local, batch)


def check_steps_per_execution(model: Any) -> None:
    steps = int(getattr(model, "steps_per_execution", 1) or 1)
    if steps > 1:
        raise KerasMultiWorkerError(
            f"model.compile(steps_per_execution={steps}) does not work under multi-worker "
            "MultiWorkerMirroredStrategy with Keras 3 (its multi-step tf.while_loop holds "
            "the collectives and fails to run): compile with steps_per_execution=1, or use "
            "raytf.KerasTrainer, whose compiled loop runs several steps per call"
        )


def check_jit_compile(model: Any, has_gpus: bool) -> None:
    """XLA compiles only NCCL collectives; CPU workers all-reduce over gRPC's ring, so a
    jit-compiled Keras step (its all-reduce inside) fails at its first run with
    "Only compiling NCCL/auto collective is supported, got: ring" (TF 2.21)."""
    if getattr(model, "jit_compile", False) is True and not has_gpus:
        raise KerasMultiWorkerError(
            "model.compile(jit_compile=True) cannot run under multi-worker "
            "MultiWorkerMirroredStrategy on CPU workers: XLA compiles only NCCL collectives "
            "and CPU workers all-reduce over gRPC's ring; compile with jit_compile=False (or "
            '"auto"), or use raytf.KerasTrainer(step_mode="xla"), which compiles the step '
            "without its all-reduce"
        )


def install() -> bool:
    """Wrap Keras's two functions once per process; False (and a warning) if not applied."""
    global _installed
    if _installed:
        return True
    try:
        why = why_not_patchable()
    except Exception as exc:  # noqa: BLE001 - no Keras, or one we cannot read: leave it alone
        why = f"{type(exc).__name__}: {exc}"
    if why is not None:
        logger.warning(
            "raytf: Keras 3's fit/evaluate under multi-worker MWMS are left unpatched (%s); "
            "use raytf.KerasTrainer if model.fit fails",
            why,
        )
        return False
    module = _trainer_module()
    original_build = module.TensorFlowTrainer._maybe_symbolic_build
    original_reduce = module.reduce_per_replica

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy
        if iterator is None or strategy is None or not _is_multi_worker(strategy):
            return original_build(self, iterator=iterator, data_batch=data_batch)
        check_steps_per_execution(self)
        import tensorflow as tf

        check_jit_compile(self, bool(tf.config.list_logical_devices("GPU")))
        for _, _, it in iterator:
            data_batch = _local_values(strategy, next(it))
            break
        return original_build(self, iterator=None, data_batch=data_batch)

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and _is_multi_worker(strategy):
            import tensorflow as tf

            return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return original_reduce(values, strategy, reduction)

    _maybe_symbolic_build.__wrapped__ = original_build  # type: ignore[attr-defined]
    reduce_per_replica.__wrapped__ = original_reduce  # type: ignore[attr-defined]
    module.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    module.reduce_per_replica = reduce_per_replica
    _installed = True
    return True
