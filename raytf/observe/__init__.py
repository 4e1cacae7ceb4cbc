"""What the driver records of a run for people and their tools, beside running it.

Each record keeper is a driver callback (``raytf.Callback``) on the callbacks'
own thread, so writing files or metrics never slows the control loop:
``RunRecorder`` keeps the event log (``metrics.jsonl``) and each rank's
output (``logs/``), and hands reports to the TensorBoard writer and to Ray's
metrics (Prometheus). None of them imports TensorFlow.
"""

from __future__ import annotations

from raytf.observe.recorder import RunRecorder

__all__ = ["RunRecorder"]
