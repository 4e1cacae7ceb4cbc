"""``raytf.Session``: drive a distributed Keras model one command at a time.

Eager execution's promise, for a whole worker group: from a REPL or a
notebook, open a group, run some steps, look at the metrics, evaluate, change
the learning rate, checkpoint, run more, close::

    with raytf.Session(build_model, dataset_fn, global_batch_size=128,
                       validation_fn=val_fn,
                       scaling_config=raytf.ScalingConfig(num_workers=2)) as s:
        s.fit(steps=50)              # {'step': 50, 'loss': ..., 'accuracy': ...}
        s.evaluate()                 # global metrics over the validation set
        s.set_learning_rate(1e-4)
        s.checkpoint()               # committed, like any raytf checkpoint
        s.fit(steps=1, step_mode="eager")   # print() / breakpoint() inside the model
        s.run(lambda w: float(w.model.layers[0].kernel.numpy().std()))  # one value per rank
        s.fit(steps=50)

``Session.custom(setup)`` opens the same kind of group for any loop: each
rank builds its pieces once in ``setup``, and ``run(fn, ...)`` drives them.

The driver's controller runs in a background thread, exactly as under
``Trainer.fit`` (same placement, set-up, checkpoints, watchdog); the workers run
``KerasWorkerRun.serve``, which executes each command on every rank in the same
order, so collectives line up. A failure ends the session with the worker's
error: an interactive group does not restart behind its user's back. Open a
Session with the same ``RunConfig.name`` to continue from its last checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import threading
from collections.abc import Callable
from typing import Any

from raytf.config import RunConfig, ScalingConfig
from raytf.driver.launch import RunSpec, make_controller
from raytf.driver.listeners import Listeners
from raytf.errors import ConfigError, RaytfError
from raytf.keras.loop import FitSpec, run_session
from raytf.keras.steps import check_step_mode
from raytf.keras.trainer import check_fit_options, known_replicas
from raytf.messages import Command, Reply
from raytf.result import Result
from raytf.worker.commands import SESSION_ERROR_KEY, run_custom_session


class SessionClosedError(RaytfError):
    """The session was closed, or its worker group ended."""


class Session:
    """An open MWMS worker group holding one compiled Keras model; see the module doc.

    Every command below raises ``SessionClosedError`` once the session is closed or
    its group ended, ``RaytfError`` when it raised on some rank (the group stays
    open), and the run's ``TrainingFailedError`` when the group failed meanwhile.

    Args:
        build_model: As ``KerasTrainer``'s: returns the compiled model.
        dataset_fn: As ``KerasTrainer``'s: this worker's training input.
        global_batch_size: Examples per step over the whole group.
        steps_per_epoch: Steps before the input starts its next pass. Default None: one
            pass over the shard.
        validation_fn: As ``dataset_fn``, for ``evaluate``. Default None.
        validation_steps: Batches ``evaluate`` reads. Default None: one pass.
        step_mode: ``"compiled"`` (default), ``"eager"`` or ``"xla"``.
        steps_per_call: Steps per call into the graph. Default 1.
        train_loop_config: Passed to ``build_model`` and ``dataset_fn``. Default None.
        scaling_config: A fixed number of workers (not elastic, not 0). Default None:
            ``ScalingConfig()``.
        run_config: Default None: ``RunConfig()``; reuse a name to continue from its
            last checkpoint.
        open_timeout_s: Seconds to wait for every rank to build the model. Default 600.

    Raises:
        ConfigError: An option is invalid, ``num_workers`` is elastic or 0, or
            ``FailureConfig.max_failures`` is not unset or 0 (a Session never restarts).
        UnsatisfiableResourcesError: No node can ever hold a worker.
        TrainingFailedError: The group failed while opening.
        TimeoutError: Not every rank was ready within ``open_timeout_s``.
    """

    def __init__(
        self,
        build_model: Callable[..., Any],
        dataset_fn: Callable[..., Any],
        *,
        global_batch_size: int,
        steps_per_epoch: int | None = None,
        validation_fn: Callable[..., Any] | None = None,
        validation_steps: int | None = None,
        step_mode: str = "compiled",
        steps_per_call: int = 1,
        train_loop_config: dict[str, Any] | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        open_timeout_s: float = 600.0,
    ):
        spec = FitSpec(
            build_model=build_model,
            dataset_fn=dataset_fn,
            global_batch_size=global_batch_size,
            steps_per_epoch=steps_per_epoch,
            validation_fn=validation_fn,
            validation_steps=validation_steps,
            step_mode=step_mode,
            steps_per_call=steps_per_call,
        )
        scaling = scaling_config or ScalingConfig()
        check_fit_options(spec, known_replicas(scaling))
        self._keras = True
        self._open(
            functools.partial(run_session, spec),
            train_loop_config,
            scaling,
            run_config,
            open_timeout_s,
        )

    @classmethod
    def custom(
        cls,
        setup: Callable[..., Any],
        *,
        train_loop_config: dict[str, Any] | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        open_timeout_s: float = 600.0,
    ) -> Session:
        """A session for any loop: each rank calls ``setup(worker[, config])`` once (its
        value is ``worker.state``), then every ``run(fn, ...)`` calls ``fn(worker, ...)``
        (``raytf.worker.commands.CustomLoopRun``). ``fit``/``evaluate`` are Keras's and
        not available; ``run``, ``step``, ``checkpoint`` and ``close`` are.

        Args:
            setup: ``setup(worker)`` or ``setup(worker, config)``, once per rank.
            train_loop_config: The ``config`` ``setup`` gets. Default None: empty.
            scaling_config: A fixed number of workers. Default None: ``ScalingConfig()``.
            run_config: Default None: ``RunConfig()``.
            open_timeout_s: Seconds to wait for every rank's ``setup``. Default 600.

        Returns:
            The open ``Session``.

        Raises:
            ConfigError: As the constructor's.
            TimeoutError: Not every rank was ready within ``open_timeout_s``.
        """
        session = cls.__new__(cls)
        session._keras = False
        session._open(
            functools.partial(run_custom_session, setup),
            train_loop_config,
            scaling_config or ScalingConfig(),
            run_config,
            open_timeout_s,
        )
        return session

    def _open(
        self,
        loop: Callable[..., Any],
        train_loop_config: dict[str, Any] | None,
        scaling: ScalingConfig,
        run_config: RunConfig | None,
        open_timeout_s: float,
    ) -> None:
        run_config = run_config or RunConfig()
        scaling.require_fixed_size(
            "a Session", "keeps one group of a fixed size (resizing restarts it)"
        )
        fc = run_config.failure_config
        if fc.max_failures is None:  # raytf's default: a Session never restarts its group
            run_config = dataclasses.replace(
                run_config, failure_config=dataclasses.replace(fc, max_failures=0)
            )
        elif fc.max_failures != 0:
            raise ConfigError(
                "a Session does not restart its group on failure (its user would lose track of "
                "the model's state): leave FailureConfig.max_failures unset (or 0) and reopen the "
                "Session with the same RunConfig.name to continue from its last checkpoint"
            )
        self.scaling = scaling
        run = RunSpec(
            fn=loop, config=dict(train_loop_config or {}), scaling=scaling, run_config=run_config
        )
        self._controller = make_controller(
            run, what="session", listeners=Listeners(on_reply=self._on_reply)
        )
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._replies: dict[int, dict[int, Any]] = {}
        self._done = False
        self._result: Result | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drive, name="raytf-session", daemon=True)
        self._thread.start()
        self.info = self._wait(0, open_timeout_s, "open")

    # -- the controller's thread ------------------------------------------------
    def _drive(self) -> None:
        try:
            self._result = self._controller.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._error = exc
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _on_reply(self, reply: Reply) -> None:
        with self._cond:
            self._replies.setdefault(reply.command_id, {})[reply.rank] = reply.value
            self._cond.notify_all()

    # -- commands -----------------------------------------------------------------
    def _wait(
        self, command_id: int, timeout_s: float | None, what: str, gather: bool = False
    ) -> Any:
        world = self.scaling.num_workers
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._done or len(self._replies.get(command_id, {})) == world,
                timeout=timeout_s,
            )
            answers = self._replies.pop(command_id, {})
        if len(answers) == world:
            errors = {
                r: v[SESSION_ERROR_KEY]
                for r, v in answers.items()
                if isinstance(v, dict) and SESSION_ERROR_KEY in v
            }
            if errors:
                first = min(errors)
                raise RaytfError(
                    f"session: {what} failed on rank(s) {sorted(errors)}; rank {first}: "
                    f"{errors[first]}"
                )
            return [answers[r] for r in sorted(answers)] if gather else answers[0]
        if self._error is not None:
            raise self._error
        if not ok:
            raise TimeoutError(f"session: {what} got no answer from every rank in {timeout_s} s")
        raise SessionClosedError(f"session: the worker group ended before {what} finished")

    def _keras_only(self, what: str) -> None:
        if not self._keras:
            raise ConfigError(
                f"session.{what} needs a Keras session (Session(build_model, dataset_fn, ...)); "
                "a custom-loop session runs functions: session.run(fn, ...)"
            )

    def _call(
        self, op: str, timeout_s: float | None = None, gather: bool = False, **args: Any
    ) -> Any:
        if self._done:
            if self._error is not None:
                raise SessionClosedError(f"session ended with an error: {self._error}")
            raise SessionClosedError("session is closed")
        command = Command(next(self._ids), op, args)
        if not self._controller.send_command(command):  # every rank runs it, in the same order
            raise SessionClosedError("session has no worker group")
        return self._wait(command.id, timeout_s, op, gather)

    def fit(self, steps: int, step_mode: str | None = None) -> dict[str, float]:
        """Run ``steps`` global training steps; global metrics over those steps.

        ``step_mode`` ("eager", "compiled", "xla") applies to this command only: one
        eager step to ``print`` or stop in a debugger on a rank, then compiled again.

        Args:
            steps: Global steps to run, at least 1.
            step_mode: ``"eager"``, ``"compiled"`` or ``"xla"`` for this command. Default
                None: the session's.

        Returns:
            Metric name to its global value over these steps, with ``step``.

        Raises:
            ConfigError: ``steps`` or ``step_mode`` is invalid, or a custom session.
        """
        self._keras_only("fit")
        if not isinstance(steps, int) or steps < 1:
            raise ConfigError(f"steps = {steps!r}: must be a positive int")
        if step_mode is not None:
            check_step_mode(step_mode, 1)
        return self._call("fit", steps=steps, step_mode=step_mode)

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``fn(worker, *args, **kwargs)`` on every rank; each rank's value, rank-ordered.

        ``worker`` holds ``model``, ``strategy``, ``ctx`` (the rank's context),
        ``iterator`` (the training input), ``step`` and ``run_steps(n)``: enough for
        per-rank values, gradient norms, a layer's output on a batch, or a custom
        step run under ``worker.strategy``. Every rank runs it in the same order, so
        collectives inside line up. An exception answers with each failing rank's
        traceback and the group stays usable, unless some ranks raised while others
        wait in a collective (the hang timeout then ends the session).

        Args:
            fn: Called as ``fn(worker, *args, **kwargs)`` on each rank; must pickle.
            *args: Passed on to ``fn``.
            **kwargs: Passed on to ``fn``.

        Returns:
            Each rank's return value, rank 0 first.
        """
        return self._call("run", gather=True, fn=fn, args=args, kwargs=kwargs)

    def evaluate(self, steps: int | None = None) -> dict[str, float]:
        """Global metrics over the validation data (one pass, or ``steps`` batches).

        Args:
            steps: Validation batches to read. Default None: ``validation_steps``, else
                one pass.

        Returns:
            Metric name to its global value.

        Raises:
            ConfigError: A custom session.
            RaytfError: No ``validation_fn`` was given (raised on every rank).
        """
        self._keras_only("evaluate")
        return self._call("evaluate", steps=steps)

    def set_learning_rate(self, value: float) -> None:
        """Set the optimizer's learning rate on every worker.

        Args:
            value: The new learning rate, a number (an optimizer built with a schedule
                refuses it: a ``RaytfError`` naming the rank).

        Raises:
            ConfigError: A custom session.
        """
        self._keras_only("set_learning_rate")
        self.info = self._call("set_learning_rate", value=float(value))

    @property
    def learning_rate(self) -> float:
        """The optimizer's current learning rate (rank 0's)."""
        self._keras_only("learning_rate")
        return self._call("describe")["learning_rate"]

    @property
    def step(self) -> int:
        """The global step reached, counting on from a resumed checkpoint's."""
        return self._call("describe")["step"]

    def weights_digest(self) -> str:
        """SHA-256 of the model's weights on rank 0 (identical on every rank)."""
        self._keras_only("weights_digest")
        return self._call("describe")["weights_digest"]

    def get_weights(self) -> list[Any]:
        """The model's weights (rank 0's), as NumPy arrays on the driver."""
        self._keras_only("get_weights")
        return self._call("get_weights")

    def checkpoint(self) -> str:
        """Checkpoint every rank at the current step; returns the committed directory.

        Raises:
            RaytfError: The checkpoint was taken but not committed.
        """
        step = self._call("checkpoint")["step"]
        latest = self._controller.ckpts.latest
        if latest is None or latest.step != step:
            raise RaytfError(f"session: checkpoint at step {step} was not committed")
        return latest.path

    def close(self) -> Result:
        """End the group (the workers exit their loop) and return the run's Result.

        Raises:
            TrainingFailedError: The group had failed; ``causes`` says why.
        """
        if not self._done:
            self._call("close")
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if not self._done:
            self.close()
        else:
            self._thread.join()
