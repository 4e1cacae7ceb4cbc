"""Keras on the cluster: ``KerasTrainer``, ``Session``, the worker loop they share, and the
callback that puts Keras's own ``model.fit`` into raytf's metrics and checkpoints.

``import keras`` inside this package is the Keras library, never this
package: every import here is absolute.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ReportCheckpointCallback": "raytf.keras.report_callback",
    "for_this_rank": "raytf.keras.report_callback",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'raytf.keras' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
