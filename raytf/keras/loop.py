"""The worker side of ``KerasTrainer`` and ``Session``: Keras 3's step, raytf's loop.

Runs inside each worker after MWMS exists. The user's ``build_model`` makes
and compiles the model inside ``strategy.scope()``; ``dataset_fn`` builds the
worker's input the way TF's multi-worker tutorial does (shard, then batch by
the per-replica size). raytf owns the loop: epochs, steps per call,
callbacks, reports, and positioning the input by global step, because a
distributed iterator cannot be checkpointed (tensorflow#56372).

Exact resume: weights, optimizer slots, the step and the RNG come back from
raytf's checkpoint, and so do the metric accumulators of a half-done epoch;
the input stream (the shard, repeated epoch after epoch) restarts at the
batch after the checkpoint. Keras callbacks are built afresh, so their own
counters (EarlyStopping's patience) restart; the learning rate, being an
optimizer variable, is restored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from raytf.data.batching import per_replica_batch, steps_per_epoch_from_shards
from raytf.digests import weights_digest
from raytf.errors import ConfigError
from raytf.keras.callbacks import callbacks_for_rank
from raytf.keras.steps import check_step_mode, make_test_function, make_train_function
from raytf.worker.commands import serve_commands
from raytf.worker.context import TrainContext, get_context
from raytf.worker.fit import metric_state
from raytf.worker.user_fn import call_user

# Session commands whose error is an answer: the group stays usable when every rank raised
# alike (no collective left half-run). ``run`` is the user's function on every rank.
ANSWERING_OPS = ("set_learning_rate", "describe", "get_weights", "run")


@dataclass
class FitSpec:
    """Everything a worker needs to run the Keras loop; pickled once per run."""

    build_model: Callable[..., Any]
    dataset_fn: Callable[..., Any]
    global_batch_size: int
    epochs: int = 1
    steps_per_epoch: int | None = None
    validation_fn: Callable[..., Any] | None = None
    validation_steps: int | None = None
    callbacks: list[Any] = field(default_factory=list)
    step_mode: str = "compiled"
    steps_per_call: int = 1
    report_every: int = 10
    return_weights: bool = True


class KerasWorkerRun:
    """One worker's model, input and step functions; ``fit`` or ``serve`` drives them."""

    def __init__(self, spec: FitSpec, config: dict, ctx: TrainContext | None = None):
        import tensorflow as tf

        self.tf = tf
        self.spec = spec
        self.config = config
        self.ctx = ctx or get_context()
        self.strategy = self.ctx.strategy
        self.replicas = int(self.strategy.num_replicas_in_sync)
        self.local_replicas = self.replicas // self.ctx.world_size
        self.per_replica = per_replica_batch(spec.global_batch_size, self.replicas)
        self._gather = None
        self.model = self._build_model()
        self.steps_per_epoch = self._resolve_steps(
            spec.dataset_fn, spec.steps_per_epoch, "dataset_fn", "steps_per_epoch"
        )
        self.validation_steps = None
        if spec.validation_fn is not None:
            self.validation_steps = self._resolve_steps(
                spec.validation_fn, spec.validation_steps, "validation_fn", "validation_steps"
            )
        self._build_metrics()
        self._metrics_io = metric_state.MetricState(
            self.strategy, self._metric_variables(), self.ctx.rank * self.local_replicas
        )
        self.ctx.add_checkpoint_state(
            "keras_metrics", self._metrics_io.capture, self._metrics_io.restore
        )
        self.step = self.ctx.restore(model=self.model, optimizer=self.model.optimizer)
        self.iterator = iter(self._distribute(spec.dataset_fn, self.steps_per_epoch, self.step))
        self.val_iterator = None
        if spec.validation_fn is not None:
            self.val_iterator = iter(self._distribute(spec.validation_fn, self.validation_steps, 0))
        self.train_fn = make_train_function(self.model, self.strategy, spec.step_mode)
        self._train_fns = {spec.step_mode: self.train_fn}  # a Session may switch per command
        self.test_fn = make_test_function(self.model, self.strategy, spec.step_mode)

    def train_fn_for(self, step_mode: str | None):
        """The train function of ``step_mode`` (built once, on first use)."""
        mode = step_mode or self.spec.step_mode
        if mode not in self._train_fns:
            check_step_mode(mode, self.spec.steps_per_call)
            self._train_fns[mode] = make_train_function(self.model, self.strategy, mode)
        return self._train_fns[mode]

    # -- set-up ---------------------------------------------------------------
    def _build_model(self):
        import keras

        with self.strategy.scope():
            model = call_user(self.spec.build_model, config=self.config)
        if not isinstance(model, keras.Model):
            raise ConfigError(f"build_model returned {type(model).__name__}, not a keras.Model")
        if not model.compiled or model.optimizer is None:
            raise ConfigError(
                "build_model must compile the model, as for model.fit: "
                'model.compile(optimizer="adam", loss=..., metrics=[...])'
            )
        if not model.built:
            raise ConfigError(
                "build_model must return a built model (start it with keras.Input(shape) or "
                "call model.build(input_shape)): checkpoints restore into existing variables"
            )
        return model

    def _input_context(self):
        return self.tf.distribute.InputContext(
            num_input_pipelines=self.ctx.world_size,
            input_pipeline_id=self.ctx.rank,
            num_replicas_in_sync=self.replicas,
        )

    def _make_dataset(self, fn, input_context):
        ds = call_user(fn, input_context, config=self.config)
        if not isinstance(ds, self.tf.data.Dataset):
            raise ConfigError(f"{fn.__name__} returned {type(ds).__name__}, not a tf.data.Dataset")
        return ds

    def _resolve_steps(self, fn, given: int | None, what: str, option: str) -> int:
        """Steps per pass over ``fn``'s data: given, or agreed from every worker's shard."""
        if given is not None:
            return int(given)
        tf = self.tf
        card = int(self._make_dataset(fn, self._input_context()).cardinality())
        if card in (tf.data.INFINITE_CARDINALITY, tf.data.UNKNOWN_CARDINALITY):
            kind = "infinite" if card == tf.data.INFINITE_CARDINALITY else "unknown"
            raise ConfigError(
                f"{what}'s dataset has {kind} length on rank {self.ctx.rank}: pass {option}"
            )
        return steps_per_epoch_from_shards(self.per_worker(card), self.local_replicas)

    def _distribute(self, fn, steps_per_pass: int, first_step: int):
        """A distributed dataset whose stream starts at ``first_step`` (0-based count of steps)."""
        k = self.local_replicas
        make_dataset = self._make_dataset

        def make(input_context):
            ds = make_dataset(fn, input_context)
            # One pass is exactly steps_per_pass steps; passes repeat, as Keras's fit does.
            ds = ds.take(steps_per_pass * k).repeat()
            return ds.skip(first_step * k) if first_step else ds

        return self.strategy.distribute_datasets_from_function(make)

    def per_worker(self, value: int) -> list[int]:
        """Every worker's ``value``, by rank: one small all-reduce (set-up, epoch ends)."""
        if self._gather is None:
            self._gather = self._make_gather()
        out = self._gather(self.tf.constant(float(value), self.tf.float64))
        return [int(v) for v in self.strategy.experimental_local_results(out)[0].numpy()]

    def _make_gather(self):
        tf, strategy = self.tf, self.strategy
        rank, world, k = self.ctx.rank, self.ctx.world_size, self.local_replicas

        def gather(value):
            rc = tf.distribute.get_replica_context()
            first_local = tf.cast(rc.replica_id_in_sync_group % k == 0, tf.float64)
            mine = tf.one_hot(rank, world, dtype=tf.float64) * value * first_local
            return rc.all_reduce(tf.distribute.ReduceOp.SUM, mine)

        # In a tf.function: MWMS warns about (and pays for) eager collectives.
        return tf.function(lambda value: strategy.run(gather, args=(value,)))

    # -- metric state in checkpoints -------------------------------------------
    def _build_metrics(self) -> None:
        """Create the compiled metrics' variables now, so a restore has them to fill.

        Keras builds ``compile(metrics=...)`` lazily, at the first update; a
        checkpoint restored before that would lose a half epoch's accuracy
        counts. One update on one real batch builds them; the reset undoes it.
        """
        import keras

        data = next(iter(self._make_dataset(self.spec.dataset_fn, self._input_context()).take(1)))
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with self.strategy.scope():
            y_pred = self.model(x, training=False)
            self.model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
        self.model.reset_metrics()

    def _metric_variables(self):
        return [v for m in self.model.metrics for v in m.variables]

    # -- running ----------------------------------------------------------------
    def run_steps(
        self, n: int, on_call: Callable[[dict], None] | None = None, train_fn: Any = None
    ) -> dict:
        """Run ``n`` training steps in calls of ``steps_per_call``; metrics after the last."""
        logs: dict = {}
        train_fn = train_fn or self.train_fn
        while n > 0:
            k = min(self.spec.steps_per_call, n)
            logs = {key: float(v) for key, v in train_fn(self.iterator, k).items()}
            self.step += k
            n -= k
            if on_call is not None:
                on_call(logs)
        return logs

    def evaluate(self, steps: int | None = None) -> dict:
        """Global metrics over one pass of the validation data (or ``steps`` batches)."""
        if self.val_iterator is None:
            raise ConfigError("evaluate needs validation data: pass validation_fn")
        steps = steps or self.validation_steps
        self.model.reset_metrics()
        logs: dict = {}
        left = steps
        while left > 0:
            k = min(self.spec.steps_per_call, left)
            logs = {key: float(v) for key, v in self.test_fn(self.val_iterator, k).items()}
            left -= k
            self.ctx.heartbeat()
        return logs

    def agree_any(self, flag: bool) -> bool:
        """True on every rank if it is true on any: keeps ranks stopping together."""
        return any(self.per_worker(int(bool(flag))))

    def digest(self) -> str:
        return weights_digest(self.model.get_weights())

    def fit(self) -> dict:
        """Keras's ``fit`` semantics over ``epochs`` x ``steps_per_epoch`` global steps."""
        import keras

        spec, ctx, model = self.spec, self.ctx, self.model
        spe = self.steps_per_epoch
        callbacks = keras.callbacks.CallbackList(
            callbacks_for_rank(list(spec.callbacks), ctx.rank),
            add_history=True,
            add_progbar=False,
            model=model,
            verbose=0,
            epochs=spec.epochs,
            steps=spe,
        )
        model.stop_training = False
        ctx.set_total_steps(spec.epochs * spe)
        callbacks.on_train_begin()
        reported = self.step
        epoch = self.step // spe
        epochs_run = epoch
        while epoch < spec.epochs and not model.stop_training:
            begin, end = epoch * spe, (epoch + 1) * spe
            if self.step == begin:
                model.reset_metrics()  # a resumed half epoch keeps its restored accumulators
            callbacks.on_epoch_begin(epoch)
            logs: dict = {}
            while self.step < end:
                k = min(spec.steps_per_call, end - self.step)
                callbacks.on_train_batch_begin(self.step - begin)
                logs = self.run_steps(k)
                callbacks.on_train_batch_end(self.step - begin - 1, logs)
                if self.step == end:
                    break  # the epoch's last step_end follows its report, below
                ctx.step_end(self.step)
                if self.step // spec.report_every > (self.step - k) // spec.report_every:
                    ctx.report(
                        {"step": self.step, "epoch": epoch + 1, **logs},
                        examples=(self.step - reported) * spec.global_batch_size,
                    )
                    reported = self.step
            epoch_logs = dict(logs)
            if self.val_iterator is not None:
                epoch_logs.update({f"val_{k}": v for k, v in self.evaluate().items()})
            callbacks.on_epoch_end(epoch, epoch_logs)
            ctx.report(
                {"step": self.step, "epoch": epoch + 1, "epoch_end": True, **epoch_logs},
                examples=(self.step - reported) * spec.global_batch_size,
            )
            reported = self.step
            # After the report: a checkpoint at an epoch boundary never loses that epoch's logs.
            ctx.step_end(self.step)
            model.stop_training = self.agree_any(model.stop_training)
            epoch += 1
            epochs_run = epoch
        callbacks.on_train_end()
        out = {
            "weights_digest": self.digest(),
            "steps": self.step,
            "epochs": epochs_run,
            "stopped_early": bool(model.stop_training) and epochs_run < spec.epochs,
            "learning_rate": self._describe()["learning_rate"],
        }
        if spec.return_weights and ctx.is_chief:
            out["weights"] = model.get_weights()
        return out

    def serve(self) -> dict:
        """An interactive session's loop: run each command the driver sends, on every rank."""
        return serve_commands(
            self.ctx,
            self._handle,
            self._describe,
            ANSWERING_OPS,
            on_close=lambda: {"weights_digest": self.digest(), "steps": self.step},
        )

    def _handle(self, op: str, args: dict) -> Any:
        ctx = self.ctx
        if op == "fit":
            self.model.reset_metrics()
            first = self.step

            def after_call(logs: dict) -> None:
                ctx.step_end(self.step)

            train_fn = self.train_fn_for(args.get("step_mode"))
            logs = self.run_steps(int(args["steps"]), after_call, train_fn)
            ctx.report(
                {"step": self.step, **logs},
                examples=(self.step - first) * self.spec.global_batch_size,
            )
            return {"step": self.step, **logs}
        if op == "evaluate":
            return self.evaluate(args.get("steps"))
        if op == "set_learning_rate":
            self.model.optimizer.learning_rate = float(args["value"])
            return self._describe()
        if op == "checkpoint":
            ctx.checkpoint_now(self.step, "session")
            return {"step": self.step}
        if op == "describe":
            return self._describe()
        if op == "get_weights":
            return self.model.get_weights() if ctx.is_chief else None
        if op == "run":
            return args["fn"](self, *args["args"], **args["kwargs"])
        raise ConfigError(f"unknown session command {op!r}")

    def _describe(self) -> dict:
        return {
            "step": self.step,
            "learning_rate": float(np.asarray(self.model.optimizer.learning_rate)),
            "weights_digest": self.digest(),
            "replicas": self.replicas,
        }


def run_fit(spec: FitSpec, config: dict) -> dict:
    """``train_loop_per_worker`` of ``KerasTrainer``."""
    return KerasWorkerRun(spec, config).fit()


def run_session(spec: FitSpec, config: dict) -> dict:
    """``train_loop_per_worker`` of an interactive ``Session``."""
    return KerasWorkerRun(spec, config).serve()
