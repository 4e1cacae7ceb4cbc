"""A raytf run as a Ray Tune trial.

``Tuner(trainer.as_trainable(), param_space={...})``: each trial is one raytf
driver (the trainable actor, holding no resources) and its worker group. The
trial's placement group is the whole group's reservation: one bundle per
worker, the driver's head bundle empty, so Tune only starts a trial when all
its workers fit, and raytf places its workers in those bundles instead of
making a placement group of its own (a nested one would compete with the
other trials for the same resources).

What Tune sees and does:
- every report of rank 0 is one Tune result, as it comes (the driver does not
  wait for Tune: training never blocks on the tuner);
- a committed raytf checkpoint marks the next result ``should_checkpoint``:
  Tune then takes a copy of that step's directory, and a trial Tune restores
  (after a failure of the trial itself, or ``Tuner.restore``) resumes from it.
  A report at a step where a checkpoint is due waits for that commit (the loop
  reports, then saves): otherwise the last rung's result, at which ASHA stops the
  trial, raced the commit of the trial's last checkpoint, and Tune kept the one
  before (seen in CI: step 64 handed over instead of 128);
- a scheduler's STOP (ASHA, a stopper) ends the trial: ``cleanup`` asks the
  driver to stop, which tears the worker group down before the actor exits.

The trial's config is merged over ``train_loop_config`` (a config in Ray Train's
shape, ``{"train_loop_config": {...}}``, by what it nests). Workers are not
restarted between trials (a strategy cannot be re-made in a process):
``reuse_actors`` is off.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import shutil
import threading
import time
from typing import Any

from ray import tune
from ray.util import get_current_placement_group

from raytf.checkpoint.layout import (
    CKPT_DIR,
    MANIFEST,
    copy_flat,
    parse_step_dirname,
    step_dirname,
)
from raytf.config import ScalingConfig
from raytf.driver.launch import RunSpec, make_controller
from raytf.driver.listeners import Listeners
from raytf.rundir.storage import Storage
from raytf.settings import Settings

STOP_JOIN_S = 60.0  # how long cleanup waits for the group's teardown


def checkpoint_step(checkpoint: Any) -> int | None:
    """The raytf step a Tune checkpoint holds, or None: Tune also saves a trial that ends
    before raytf committed anything (an early stop), and that checkpoint is empty.

    Args:
        checkpoint: A ``ray.tune.Checkpoint`` (or anything with a ``path``), or a path.

    Returns:
        The highest step directory in it, or None when it holds none.
    """
    path = getattr(checkpoint, "path", checkpoint)
    if not path or not os.path.isdir(path):
        return None
    steps = [s for s in map(parse_step_dirname, os.listdir(path)) if s is not None]
    return max(steps) if steps else None


def loop_config(trial_config: dict) -> dict:
    """What a trial's config adds to ``train_loop_config``: the config itself, or in Ray
    Train's shape (``param_space={"train_loop_config": {...}}``) what it nests there.

    Args:
        trial_config: The trial's config as Tune gives it.

    Returns:
        The dict merged over the trainer's ``train_loop_config``.
    """
    nested = trial_config.get("train_loop_config")
    if isinstance(nested, dict) and set(trial_config) == {"train_loop_config"}:
        return nested
    return trial_config


DATA_BUNDLE = {"CPU": 1.0}  # Ray Data's tasks inside a trial: Tune captures them into its group


def trial_resources(scaling: ScalingConfig, with_data: bool = False) -> tune.PlacementGroupFactory:
    """The trial's reservation: an empty head bundle for the driver, one per worker, and
    with datasets one CPU for Ray Data (its tasks run inside the trial's group).

    Args:
        scaling: The trainer's ``ScalingConfig``: its workers' bundles and strategy.
        with_data: Add the CPU bundle for Ray Data. Default False.

    Returns:
        A ``tune.PlacementGroupFactory`` with the trainer's placement strategy.

    Raises:
        ConfigError: ``num_workers`` is elastic or 0: a trial holds a fixed reservation.
    """
    scaling.require_fixed_size("a Tune trial", "holds a fixed reservation")
    bundle = scaling.worker_resources()
    strategy = scaling.placement_strategy
    bundles = [{}] + [dict(bundle)] * scaling.num_workers + ([DATA_BUNDLE] if with_data else [])
    return tune.PlacementGroupFactory(bundles, strategy)


def trainable(spec: RunSpec) -> type[tune.Trainable]:
    """A Tune ``Trainable`` class running ``spec`` (``Trainer.run_spec()``) once per trial.

    Args:
        spec: What to run: the loop, its config, the scaling and run configs, datasets.

    Returns:
        A ``tune.Trainable`` subclass; each trial's run is named ``<name>-<trial id>``,
            saves synchronously and reports to Tune at every rank 0 report. A failed run
            fails the trial with its ``TrainingFailedError``.

    Raises:
        ConfigError: ``num_workers`` is elastic or 0.
    """
    resources = trial_resources(spec.scaling, with_data=bool(spec.datasets))

    class RaytfTrial(tune.Trainable):
        @classmethod
        def default_resource_request(cls, config):
            return resources

        def setup(self, config: dict) -> None:
            self._events: queue.Queue = queue.Queue()
            self._thread: threading.Thread | None = None
            self._controller = None
            self._restore_from: str | None = None
            self._saved_step: int | None = None
            self._last: dict = {}
            # One run directory per trial; Tune's own table replaces raytf's progress lines.
            rc = spec.run_config
            # Saves are synchronous in a trial: Tune may stop it at any report, and a
            # save still being stored when the group is torn down would be lost.
            sync = dataclasses.replace(rc.checkpoint_config, async_save=False)
            self._run_config = dataclasses.replace(
                rc, name=f"{rc.name}-{self.trial_id}", verbose=0, checkpoint_config=sync
            )

        def step(self) -> dict:
            if self._thread is None:
                self._launch()
            kind, value = self._events.get()
            if kind == "report":
                self._last = dict(value)
                out = dict(value)
                self._await_commit(value.get("step"))
            elif kind == "finished":
                out = {**self._last, "done": True}
            else:
                raise value
            latest = self._controller.ckpts.latest if self._controller else None
            if latest is not None and latest.step != self._saved_step:
                out["should_checkpoint"] = True
            return out

        def _await_commit(self, step: Any) -> None:
            """At a step where a checkpoint is due, wait (bounded) for its commit. Only once
            the run has committed one: a loop that never calls ``restore`` saves nothing."""
            every = self._run_config.checkpoint_config.checkpoint_every_steps
            if not isinstance(step, int) or not every or step % every:
                return
            if self._controller.ckpts.latest is None:
                return
            deadline = time.monotonic() + Settings.from_env().tune_commit_wait_s
            while time.monotonic() < deadline and self._thread.is_alive():
                latest = self._controller.ckpts.latest
                if latest is not None and latest.step >= step:
                    return
                time.sleep(0.05)

        def _launch(self) -> None:
            self._seed_checkpoint()
            trial = dataclasses.replace(
                spec,
                config={**spec.config, **loop_config(self.config)},
                run_config=self._run_config,
            )
            ctrl = make_controller(
                trial,
                what="trial",
                listeners=Listeners(on_report=lambda m: self._events.put(("report", m))),
                placement_group=get_current_placement_group(),
            )
            self._controller = ctrl

            def run() -> None:
                try:
                    ctrl.run()
                    self._events.put(("finished", None))
                except BaseException as exc:  # noqa: BLE001 - Tune shows the trial's error
                    self._events.put(("error", exc))

            self._thread = threading.Thread(target=run, name="raytf-trial", daemon=True)
            self._thread.start()

        def save_checkpoint(self, checkpoint_dir: str) -> str:
            """Hand Tune a copy of the newest committed checkpoint (nothing before the first)."""
            for _ in range(3):
                latest = self._controller.ckpts.latest if self._controller else None
                if latest is None:
                    break
                name = step_dirname(latest.step)
                dest = os.path.join(checkpoint_dir, name)
                try:  # the run may live on an object store: go through raytf's Storage
                    copy_flat(Storage(self._run_config.run_dir), CKPT_DIR, name, dest=dest)
                except OSError:
                    # The driver committed a newer one meanwhile and pruned this one
                    # (num_to_keep): copy the newer one instead.
                    shutil.rmtree(dest, ignore_errors=True)
                    continue
                self._saved_step = latest.step
                break
            return checkpoint_dir

        def load_checkpoint(self, checkpoint_dir: str) -> None:
            self._restore_from = checkpoint_dir

        def _seed_checkpoint(self) -> None:
            """A checkpoint Tune restores goes where raytf looks for committed ones."""
            if not self._restore_from:
                return
            storage = Storage(self._run_config.run_dir)
            for name in os.listdir(self._restore_from):
                src = os.path.join(self._restore_from, name)
                if os.path.isdir(src) and not storage.exists(CKPT_DIR, name):
                    storage.makedirs(CKPT_DIR, name)
                    # Its manifest last, as a commit writes it: a copy cut short is none.
                    names = sorted(os.listdir(src), key=lambda n: n == MANIFEST)
                    storage.upload_dir(src, CKPT_DIR, name, names=names[:-1])
                    storage.upload_dir(src, CKPT_DIR, name, names=names[-1:])

        def cleanup(self) -> None:
            """A finished, failed or early-stopped trial: the worker group goes first."""
            if self._controller is not None:
                self._controller.request_stop()
            if self._thread is not None:
                self._thread.join(STOP_JOIN_S)

        def reset_config(self, new_config: dict) -> bool:
            return False  # a new trial needs new MWMS processes

    RaytfTrial.__name__ = RaytfTrial.__qualname__ = "RaytfTrial"
    return RaytfTrial
