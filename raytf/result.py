"""What ``Trainer.fit`` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def history_from_reports(reports: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Keras's ``History.history``: one list per metric, one entry per finished epoch."""
    history: dict[str, list[Any]] = {}
    for report in reports:
        if not report.get("epoch_end"):
            continue
        for key, value in report.items():
            if key not in ("epoch_end", "step", "epoch"):
                history.setdefault(key, []).append(value)
    return history


@dataclass
class Result:
    """The outcome of a run.

    ``metrics`` is rank 0's last report and ``metrics_history`` all of rank 0's
    reports in order (as in Ray Train). ``worker_results`` holds each rank's
    return value of ``train_loop_per_worker``, rank-ordered, so a run can check
    that every worker ended in the same state. ``checkpoint`` is the latest
    committed checkpoint (a directory), if any; ``best_checkpoints`` the kept
    ones by ``CheckpointConfig.checkpoint_score_attribute``; ``load_model()``
    the trained Keras model. ``failures`` describes each
    failure survived or not, ``recoveries_s`` the time from each restart's
    start to the first resumed step, ``preemptions`` the restarts that
    followed a termination notice (not counted as failures), ``resizes`` each
    change of an elastic group's size. ``driver_round_ms`` is what one round of
    the driver's loop cost while training ran (median, p90, max over
    ``rounds``, in ms; its sleep between polls excluded): the control plane's
    own share, which grows with the number of workers.
    """

    metrics: dict[str, Any]
    metrics_history: list[dict[str, Any]]
    path: str
    attempts: int
    elapsed_s: float
    worker_results: list[Any] = field(default_factory=list)
    checkpoint: str | None = None
    # (checkpoint directory, score) of the kept checkpoints, best first (see CheckpointConfig).
    best_checkpoints: list[tuple[str, float | None]] = field(default_factory=list)
    error: BaseException | None = None
    failures: list[str] = field(default_factory=list)
    recoveries_s: list[float] = field(default_factory=list)
    preemptions: int = 0
    resizes: list[dict[str, Any]] = field(default_factory=list)
    driver_round_ms: dict[str, float] = field(default_factory=dict)
    # KerasTrainer only: the chief's final weights.
    weights: list[Any] | None = None

    def load_model(self, step: int | None = None) -> Any:
        """The trained Keras model, on this process, without starting a worker.

        The run's final ``model/model.keras``; with ``step``, checkpoint ``step``'s
        weights in the model's saved architecture (``raytf.checkpoint.model_files``).

        Args:
            step: A committed checkpoint's global step. Default None: the final
                ``model.keras``, else the latest committed checkpoint.

        Returns:
            The Keras model; one rebuilt from a checkpoint is not compiled (no optimizer).

        Raises:
            FileNotFoundError: No such committed checkpoint, or the loop never named its
                model (``ctx.restore(model=...)``), so no architecture was saved.
        """
        from raytf.checkpoint.model_files import load_model

        return load_model(self.path, step)

    @property
    def metrics_dataframe(self) -> Any:
        """Rank 0's reports as a ``pandas.DataFrame``, one row per report (Ray Train's name).

        Raises:
            ImportError: pandas is not installed.
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(
                "Result.metrics_dataframe needs pandas: pip install pandas; "
                "Result.metrics_history holds the same reports as dicts"
            ) from None
        return pd.DataFrame(self.metrics_history)

    @property
    def history(self) -> dict[str, list[Any]]:
        """Keras's ``History.history`` from rank 0's epoch-end reports (``epoch_end: True``)."""
        return history_from_reports(self.metrics_history)

    def summary(self, elapsed_s: float) -> dict[str, Any]:
        """The example jobs' last line: what a script or a test needs to judge the run.

        Expects each rank's return value to hold ``weights_digest`` and ``steps``
        (the jobs return them), so ``digests_agree`` says every worker ended alike.

        Args:
            elapsed_s: The run's wall time as the job measured it, in seconds.

        Returns:
            A JSON-able dict: final metrics, steps, attempts, failures, checkpoint,
                ``weights_digest`` and ``digests_agree``, the run directory, ...
        """
        ranks = [r for r in self.worker_results if isinstance(r, dict)]
        digests = {r.get("weights_digest") for r in ranks}
        out = {
            "final_metrics": self.metrics,
            "steps": ranks[0].get("steps") if ranks else None,
            "attempts": self.attempts,
            "failures": self.failures,
            "preemptions": self.preemptions,
            "world_size": len(self.worker_results),
            "resizes": [f"{r['before']}->{r['after']} ({r['reason']})" for r in self.resizes],
            "recoveries_s": [round(r, 2) for r in self.recoveries_s],
            "checkpoint": self.checkpoint,
            "elapsed_s": round(elapsed_s, 3),
            "weights_digest": ranks[0].get("weights_digest") if ranks else None,
            "digests_agree": len(digests) == 1 and None not in digests,
            "run_dir": self.path,
        }
        for key in ("examples_seen", "resumed_from"):  # what some jobs return as well
            if ranks and key in ranks[0]:
                out[key] = ranks[0][key]
        if self.history:
            out["history"] = self.history
        return out
