"""raytf's figures in Ray's metrics (``ray.util.metrics``): where Ray users already look.

Set on the driver, so Ray's metrics agent on the driver's node serves them
on its Prometheus endpoint (``ray_`` prefixed: ``ray_raytf_step``) and Ray's
Grafana dashboards can plot them beside the cluster's own. Every series is
tagged with the run's name; reported metrics go in one gauge,
``raytf_metric``, tagged with the metric's name. A driver not connected to
Ray (local mode without a cluster) sets nothing.
"""

from __future__ import annotations

import time
from typing import Any

from raytf.messages import Report

_GAUGES = {
    "raytf_step": "The last step rank 0 reported",
    "raytf_step_time_seconds": "Seconds per step between rank 0's last two reports",
    "raytf_examples_per_second": "Examples per second over rank 0's last two reports",
    "raytf_attempt": "The attempt running now (1 + restarts)",
    "raytf_failures": "Failures so far in this run",
    "raytf_recoveries": "Restarts so far in this run",
    "raytf_checkpoint_age_seconds": "Seconds since the last committed checkpoint",
}


class RayMetrics:
    def __init__(self, run_name: str):
        self.tags = {"run": run_name}
        self._gauges: dict[str, Any] | None = None
        self._metric = None
        self._last: tuple[float, int | None] | None = None
        self._committed: float | None = None
        self.failures = self.recoveries = 0

    def _ready(self) -> bool:
        if self._gauges is None:
            import ray

            if not ray.is_initialized():
                return False
            from ray.util.metrics import Gauge

            self._gauges = {
                n: Gauge(n, description=d, tag_keys=("run",)) for n, d in _GAUGES.items()
            }
            self._metric = Gauge(
                "raytf_metric", description="A metric rank 0 reported", tag_keys=("run", "name")
            )
        return True

    def _set(self, name: str, value: float) -> None:
        self._gauges[name].set(float(value), tags=self.tags)

    def on_report(self, report: Report, attempt: int) -> None:
        if not self._ready():
            return
        step = report.metrics.get("step")
        step = step if isinstance(step, int) else None
        if self._last is not None:
            took, last_step = report.time - self._last[0], self._last[1]
            if step is not None and last_step is not None and step > last_step and took > 0:
                self._set("raytf_step_time_seconds", took / (step - last_step))
            if report.examples and took > 0:
                self._set("raytf_examples_per_second", report.examples / took)
        if step is not None:
            self._set("raytf_step", step)
        self._last = (report.time, step)
        self._set("raytf_attempt", attempt)
        if self._committed is not None:
            self._set("raytf_checkpoint_age_seconds", time.time() - self._committed)
        for name, value in report.metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and name != "step":
                self._metric.set(float(value), tags={**self.tags, "name": name})

    def on_checkpoint(self) -> None:
        self._committed = time.time()
        if self._ready():
            self._set("raytf_checkpoint_age_seconds", 0.0)

    def on_failure(self) -> None:
        self.failures += 1
        if self._ready():
            self._set("raytf_failures", self.failures)

    def on_restart(self, attempt: int) -> None:
        self.recoveries += 1
        if self._ready():
            self._set("raytf_recoveries", self.recoveries)
            self._set("raytf_attempt", attempt)
