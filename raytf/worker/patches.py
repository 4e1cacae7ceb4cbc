"""What raytf changes in a worker's libraries, once its strategy exists.

Each change that leans on a private API is applied only when its probe
passed (``raytf.compat``; a failed probe is said on the driver's
screen, once); the Keras hooks wrap public methods and apply wherever Keras 3 imports.
"""

from __future__ import annotations

import logging

from raytf import compat
from raytf.checkpoint import unbroadcast
from raytf.worker import teardown
from raytf.worker.fit import hooks as keras_hooks
from raytf.worker.fit import mwms as keras_fit

logger = logging.getLogger("raytf")

# Every probe a worker runs: compat's own, and those of the patches beside their code.
PROBES = (*compat.PROBES, keras_fit.PROBE, unbroadcast.PROBE)


def install(report: compat.ProbeReport) -> None:
    if report.ok(keras_fit.PROBE):
        keras_fit.install()  # Keras 3's own model.fit under multi-worker MWMS
    if report.ok(unbroadcast.PROBE):
        unbroadcast.enable()  # a restore's optimizer slots made without a collective
    if report.ok(compat.ITERATOR_REAPER):
        teardown.install()  # a run ends when its last step does, not its pipeline's teardown
    try:
        keras_hooks.install()  # fit's first step, evaluate, predict: silent, declared
    except Exception as exc:  # noqa: BLE001 - no Keras 3 here: nothing of it to wrap
        logger.info("raytf: Keras's fit/evaluate/predict not wrapped (%s)", exc)
