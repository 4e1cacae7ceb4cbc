"""The three ways one benchmark run is made: raytf, hand-launched MWMS, Ray Train.

Each ``run_*`` function trains ``config`` once and returns when it is done;
the harness times it from outside and reads the workers' traces. Each way
has its host (what the shared loop in ``workloads.train`` needs from it):

- raytf: the worker context (restore, ``step_end``, ``report``) as a user writes it.
- mwms: nothing around the step; no checkpoint, no recovery, no metrics stream.
- raytrain: ``ray.train.get_checkpoint`` / ``ray.train.report`` as Ray Train's
  guide writes them: every rank saves (the chief into the reported
  directory), every rank reports, metrics every ``report_every`` steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from raytf.bench import workloads
from raytf.bench.trace import Trace


def _communication(tf, use_gpu: bool):
    impl = tf.distribute.experimental.CommunicationImplementation
    return tf.distribute.experimental.CommunicationOptions(
        implementation=impl.NCCL if use_gpu else impl.RING
    )


# -- raytf -----------------------------------------------------------------------
class RaytfHost:
    def __init__(self, ctx):
        self.ctx, self.strategy, self.rank = ctx, ctx.strategy, ctx.rank

    def restore(self, tracked: dict) -> int:
        return self.ctx.restore(**tracked)

    def step_end(self, step: int) -> None:
        self.ctx.step_end(step)

    def report(self, step: int, loss: float) -> None:
        self.ctx.report({"step": step, "loss": loss})


def raytf_loop(config: dict) -> dict:
    import raytf

    ctx = raytf.get_context()
    trace = Trace(config["trace_dir"], ctx.rank)
    out = workloads.train(RaytfHost(ctx), config, trace)
    trace.returned()
    return out


def run_raytf(config: dict, workers: int, use_gpu: bool, storage: str, name: str, **opts) -> dict:
    import raytf

    trainer = raytf.Trainer(
        raytf_loop,
        train_loop_config=config,
        scaling_config=raytf.ScalingConfig(num_workers=workers, use_gpu=use_gpu),
        run_config=raytf.RunConfig(
            name=name,
            storage_path=storage,
            verbose=0,
            checkpoint_config=raytf.CheckpointConfig(
                checkpoint_every_steps=opts.get("checkpoint_every"), num_to_keep=2
            ),
            failure_config=raytf.FailureConfig(max_failures=opts.get("max_failures", 0)),
        ),
    )
    result = trainer.fit()
    from raytf.rundir.run_state import STATE_FILE
    from raytf.rundir.storage import Storage

    startup = Storage(result.path).read_json(STATE_FILE).get("startup", {})
    return {
        "attempts": result.attempts,
        "driver_round_ms": result.driver_round_ms,
        "startup": startup,
    }


# -- hand-launched MWMS ------------------------------------------------------------
class PlainHost:
    def __init__(self, strategy, rank: int):
        self.strategy, self.rank = strategy, rank

    def restore(self, tracked: dict) -> int:
        return 0

    def step_end(self, step: int) -> None:
        pass

    def report(self, step: int, loss: float) -> None:
        pass


def mwms_worker(rank: int, config: dict, use_gpu: bool) -> None:
    """One hand-launched process: MWMS first, then the loop (``python -m raytf.bench.ways``)."""
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=_communication(tf, use_gpu)
    )
    trace = Trace(config["trace_dir"], rank)
    workloads.train(PlainHost(strategy, rank), config, trace)
    trace.returned()


def _loopback_ports(n: int) -> list[int]:
    """Free ports, closed before TF binds them: racy (ray#34271), as hand-written launchers are."""
    import socket

    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def run_mwms(config: dict, workers: int, use_gpu: bool, **_) -> dict:
    cluster = {"worker": [f"127.0.0.1:{p}" for p in _loopback_ports(workers)]}
    procs = []
    for rank in range(workers):
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": rank}}),
            TF_CPP_MIN_LOG_LEVEL="1",
        )
        if use_gpu:
            env["CUDA_VISIBLE_DEVICES"] = str(rank)  # one GPU per process, as raytf gives
        args = [sys.executable, "-m", "raytf.bench.ways", str(rank), json.dumps(config)]
        procs.append(subprocess.Popen(args + (["--gpu"] if use_gpu else []), env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        raise RuntimeError(f"hand-launched MWMS failed: exit codes {codes}")
    return {"attempts": 1}


# -- Ray Train -------------------------------------------------------------------
class RayTrainHost:
    def __init__(self, strategy, rank: int, every: int | None):
        self.strategy, self.rank, self.every = strategy, rank, every
        self.ckpt = None

    def restore(self, tracked: dict) -> int:
        import ray.train
        import tensorflow as tf

        self.step_var = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.ckpt = tf.train.Checkpoint(step=self.step_var, **tracked)
        found = ray.train.get_checkpoint()
        if found is None:
            return 0
        model, optimizer = tracked["model"], tracked["optimizer"]
        with self.strategy.scope():
            optimizer.build(model.trainable_variables)  # Keras 3 makes slots lazily
        with found.as_directory() as d:
            self.ckpt.read(os.path.join(d, "ckpt")).assert_existing_objects_matched()
        return int(self.step_var.numpy())

    def step_end(self, step: int) -> None:
        if not self.every or step % self.every:
            return
        import ray.train

        self.step_var.assign(step)
        # Ray Train's multi-worker pattern: every rank writes (saving may run
        # collectives), only the chief's directory becomes the checkpoint.
        with tempfile.TemporaryDirectory() as d:
            self.ckpt.write(os.path.join(d, "ckpt"))
            chief = ray.train.Checkpoint.from_directory(d) if self.rank == 0 else None
            ray.train.report({"step": step}, checkpoint=chief)

    def report(self, step: int, loss: float) -> None:
        import ray.train

        ray.train.report({"step": step, "loss": loss})


def raytrain_loop(config: dict) -> None:
    import ray.train
    import tensorflow as tf

    rank = ray.train.get_context().get_world_rank()
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=_communication(tf, config.get("use_gpu", False))
    )
    host = RayTrainHost(strategy, rank, config.get("checkpoint_every"))
    trace = Trace(config["trace_dir"], rank)
    workloads.train(host, config, trace)
    trace.returned()


def raytrain_available() -> str | None:
    """None when Ray Train's TensorflowTrainer can run here, else why not."""
    try:
        import ray.train.tensorflow  # noqa: F401
    except ImportError as exc:
        return f"{exc} (raytf-mwms's bench extra: pip install -e '.[bench]' in raytf's checkout)"
    return None


def run_raytrain(
    config: dict, workers: int, use_gpu: bool, storage: str, name: str, **opts
) -> dict:
    import ray.train
    from ray.train.tensorflow import TensorflowTrainer

    every = opts.get("checkpoint_every")
    trainer = TensorflowTrainer(
        raytrain_loop,
        train_loop_config={**config, "use_gpu": use_gpu, "checkpoint_every": every},
        scaling_config=ray.train.ScalingConfig(num_workers=workers, use_gpu=use_gpu),
        run_config=ray.train.RunConfig(
            name=name,
            storage_path=storage,
            failure_config=ray.train.FailureConfig(max_failures=opts.get("max_failures", 0)),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2),
        ),
    )
    trainer.fit()
    return {"attempts": None}


RUNNERS = {"raytf": run_raytf, "mwms": run_mwms, "raytrain": run_raytrain}


if __name__ == "__main__":
    mwms_worker(int(sys.argv[1]), json.loads(sys.argv[2]), "--gpu" in sys.argv[3:])
