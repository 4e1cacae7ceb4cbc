"""tf_keras (legacy Keras 2) ``model.fit`` on raytf workers, through one callback.

``tf_keras``'s own ``fit`` works under multi-worker MWMS (it is what Ray Train
falls back to). Inside ``train_loop_per_worker``, build and compile the model
in ``ctx.strategy.scope()``, and add ``ReportCheckpointCallback``: it streams
metrics to the driver and takes part in raytf's coordinated checkpoints. Its
``restore(model)`` returns the step to resume after; ``tf_keras``'s ``fit`` can
only start at an epoch (``initial_epoch``), so checkpoint at epoch ends
(``checkpoint_every_steps = steps_per_epoch``) for an exact resume. Needs the
``legacy`` extra (``tf_keras``).
"""

from __future__ import annotations

import tf_keras

from raytf.keras.report_callback import ReportCheckpointLogic


class ReportCheckpointCallback(ReportCheckpointLogic, tf_keras.callbacks.Callback):
    """Report metrics every ``report_every`` batches and at epoch ends; checkpoint on cue.

    Its ``restore(model)`` and ``initial_epoch_for(steps_per_epoch)`` are Keras 3's
    callback's (``raytf.keras.ReportCheckpointCallback``).

    Args:
        report_every: Batches between reports to the driver. Default 10.
        global_batch_size: Examples per step over the group, for the driver's
            examples/s. Default None: no throughput.
    """

    def __init__(self, report_every: int = 10, global_batch_size: int | None = None):
        super().__init__()
        self._setup(report_every, global_batch_size)
