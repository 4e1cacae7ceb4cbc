"""``raytf bench checkpoints``: a large model's checkpoints, crashes and goodput.

    raytf bench checkpoints                               # cost, recovery, goodput (local, S3)
    raytf bench checkpoints --recovery-kills 20 --goodput-minutes 10 --json FILE
    raytf bench checkpoints --storage s3://bucket/bench   # object storage (fsspec's env)
    raytf bench checkpoints --smoke                       # seconds: every figure, tiny
    raytf bench checkpoints --sizes-mb 300,1500 --stores local,s3 --json FILE  # by size

raytf only (the comparison with hand-launched MWMS and Ray Train is ``raytf
bench``). The model ("W2") is an MLP 1024-4096-4096-1024 with Adam: 25.2M
parameters, a 302 MB checkpoint, on random input (the figures are about state, not
data). Each figure comes from whole runs of 2 workers (``--parts``):

- cost: raytf's defaults against protection off, per step, from paired runs with a
  95 % interval (``raytf.bench.cost``);
- overhead: the loop's time beyond its median step, over the loop, for no
  checkpoints, synchronous saves, asynchronous saves, and asynchronous saves with
  the per-step state an emergency checkpoint needs (a checkpoint every 20 steps);
  the stall and the persist time of the last commit, from its manifest;
- recovery: SIGKILL rank 1 after step 40 (then, with ``--recovery-kills N``, every
  ``--recovery-gap`` seconds, N in all); seconds from each restart's start to the
  first resumed step (``Result.recoveries_s``), the steps redone, and where the
  restore read from: object storage runs are measured with host copies and without;
- goodput: as many steps as ``--goodput-minutes`` hold at the model's median step,
  with rank 1 SIGKILLed every ``--kill-every`` seconds, on each of
  ``--goodput-stores`` (local disk; the loopback S3 server): the kept steps at
  their median time over the wall time from ``fit()`` to its return, and the rest
  by category (``raytf.bench.lost_time``);
- results (``--sizes-mb``, ``--stores``): commit, save stall and restore by
  checkpoint size and store, one row each (``raytf.bench.sizes``).

The JSON's top-level keys (``raytf.bench.headline``) are what scripts read.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import threading
import time

import numpy as np

import raytf
from raytf.bench import cost, headline, lost_time, series, sizes
from raytf.bench.checkpoints_cli import parse_args
from raytf.rundir.storage import Storage, join_run_dir


def large_model(width: int, depth: int):
    """The workload: an MLP depth-width-width-depth with Adam, its input, and its step (a
    function of no argument, for ``strategy.run`` or a ``tf.function``)."""
    import keras
    import tensorflow as tf

    layers = [keras.Input((depth,))]
    layers += [keras.layers.Dense(width, activation="relu") for _ in range(2)]
    model = keras.Sequential([*layers, keras.layers.Dense(depth)])
    opt = keras.optimizers.Adam(1e-4)
    x = tf.random.stateless_normal((16, depth), seed=(1, 2))

    def step_fn():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - 0.5) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return model, opt, step_fn


def loop(config):
    """The large model's loop: times every step, and how long its restore took."""
    import tensorflow as tf

    entered, entered_m = time.time(), time.monotonic()  # a restart's share ends here
    ctx = raytf.get_context()
    strategy = ctx.strategy
    with strategy.scope():
        model, opt, step_fn = large_model(config["width"], config["depth"])
    t0 = time.monotonic()
    build_s = t0 - entered_m  # the model in the scope: MWMS broadcasts its initial values
    start = ctx.restore(model=model, optimizer=opt)
    restore_s = time.monotonic() - t0
    # An attempt's first report says where its start went (the recovery's breakdown).
    parts = {"entered_t": entered, "build_s": build_s, "restore_s": restore_s}

    @tf.function
    def train_step():
        return strategy.reduce("SUM", strategy.run(step_fn), axis=None)

    # This process's CPU (every thread: the save's writer and upload too) from the 6th
    # step to the start of the last: every save in between is stored by then, and the
    # last one's, still being stored when the loop returns, is left out.
    times, cpu = [], {}
    first, last = start + 6, config["steps"]
    for step in range(start + 1, config["steps"] + 1):
        if step in (first, last):
            cpu[step] = time.process_time()
        t = time.perf_counter()
        train_step()
        ctx.step_end(step)
        times.append(time.perf_counter() - t)
        if config["step_sleep"]:  # a smoke run's pace: the killer must see it train
            time.sleep(config["step_sleep"])
        if config["report_steps"]:  # every attempt's step times, for goodput
            ctx.report({"step": step, "step_s": times[-1], "t": time.time(), **parts})
            parts = {}
    params = int(sum(np.prod(v.shape) for v in model.trainable_variables))
    steps = config["steps"]
    return {
        "times": times,
        "start": start,
        "restore_s": restore_s,
        "params": params,
        "steps": steps,
        "cpu_s": cpu[last] - cpu[first] if len(cpu) == 2 else None,
        "cpu_steps": last - first,
        "cpu_saves": sum(
            1 for s in range(first, last) if config["every"] and s % config["every"] == 0
        ),
    }


def _killer(
    run_dir: str,
    first_at: int,
    every_s: float | None,
    out: list,
    stop: threading.Event,
    limit: int | None = None,
):
    """SIGKILL the last rank (rank 1 of 2) once it passes ``first_at`` (then every
    ``every_s``, each kill once the run has recovered from the one before: a kill during
    a restart slower than ``every_s`` would otherwise leave no attempt time to train; at
    most ``limit`` kills); records (step reached, time) per kill."""
    attempt = 0
    while not stop.is_set():
        try:
            st = Storage(run_dir).read_json("state.json")
        except (OSError, ValueError):
            st = {}
        ready = st.get("state") == "RUNNING" and st.get("attempt", 0) > attempt
        recovered = st.get("recoveries_s_total", len(st.get("recoveries_s", [])))
        ready = ready and recovered >= len(out)
        if ready and (st.get("last_step") or 0) >= (first_at if not out else 0):
            if out and time.time() - out[-1][1] < every_s:
                stop.wait(0.2)
                continue
            last = max(w["rank"] for w in st["workers"])  # rank 1; rank 0 of one worker
            pid = next(w["pid"] for w in st["workers"] if w["rank"] == last)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            out.append((st["last_step"], time.time()))
            attempt = st["attempt"]
            if every_s is None or (limit is not None and len(out) >= limit):
                return
        stop.wait(0.05)


def _configs(args, mode: str) -> tuple[raytf.FailureConfig, raytf.CheckpointConfig]:
    """A mode's fault tolerance: ``defaults`` is raytf's as a user gets them (raytf's own
    checkpoint interval, emergency checkpoints at their measured cadence, standbys);
    ``off`` is protection off (``max_failures=0``: no emergency copies, no standbys, and
    no checkpoints); the others save every ``--checkpoint-every`` steps and retry
    without limit."""
    if mode == "defaults":
        return raytf.FailureConfig(), raytf.CheckpointConfig()
    if mode == "off":
        return raytf.FailureConfig(max_failures=0), raytf.CheckpointConfig(default_interval=False)
    every = None if mode == "none" else args.checkpoint_every
    failure = raytf.FailureConfig(
        max_failures=-1,
        emergency_checkpoint=mode == "async+emergency",
        emergency_every_steps=args.emergency_every,
    )
    checkpoints = raytf.CheckpointConfig(
        checkpoint_every_steps=every, num_to_keep=2, async_save=mode != "sync"
    )
    return failure, checkpoints


def one_run(
    args,
    mode: str,
    *,
    kill_at=None,
    kill_every=None,
    kill_limit=None,
    steps=None,
    copies=True,
    report_steps=None,
    fn=None,
) -> dict:
    name = f"ck-{mode.replace('+', '-')}-{time.time_ns() % 10**9}"
    run_dir = join_run_dir(args.storage, name)
    failure, checkpoints = _configs(args, mode)
    kills: list = []
    stop = threading.Event()
    if kill_at is not None or kill_every is not None:
        threading.Thread(
            target=_killer,
            args=(run_dir, kill_at or 0, kill_every, kills, stop, kill_limit),
            daemon=True,
        ).start()
    os.environ["RAYTF_HOST_COPY_DIR"] = "/dev/shm" if copies else ""
    config = {"steps": steps or args.steps, "width": args.width, "depth": args.depth}
    config["every"] = checkpoints.checkpoint_every_steps
    config["report_steps"] = kill_every is not None if report_steps is None else report_steps
    config["step_sleep"] = args.step_sleep
    t0, epoch0 = time.monotonic(), time.time()
    try:
        result = raytf.Trainer(
            fn or loop,  # another workload's loop (raytf.bench.cost)
            train_loop_config=config,
            scaling_config=raytf.ScalingConfig(num_workers=args.workers, use_gpu=args.use_gpu),
            run_config=raytf.RunConfig(
                name=name,
                storage_path=args.storage,
                verbose=0,
                failure_config=failure,
                checkpoint_config=checkpoints,
            ),
        ).fit()
    finally:
        stop.set()
        os.environ.pop("RAYTF_HOST_COPY_DIR", None)
    wall = time.monotonic() - t0
    out = result.worker_results[0]
    t = np.array(out["times"][5:] if len(out["times"]) > 10 else out["times"])
    median = float(np.median(t))
    figs = {
        "name": name,
        "mode": mode,
        "params": out["params"],
        "median_step_s": median,
        "mean_step_s": float(t.mean()),  # the saves and copies included, unlike the median
        "overhead_pct": 100 * (float(t.sum()) - median * len(t)) / (median * len(t)),
        "wall_s": wall,
        "steps": out["steps"],
        "recoveries_s": list(result.recoveries_s),
        "kills": len(kills),
        "cpu_per_step_s": out["cpu_s"] / out["cpu_steps"] if out["cpu_s"] else None,
        "cpu_saves": out["cpu_saves"],
        "cpu_steps": out["cpu_steps"],
    }
    if result.checkpoint is not None:
        manifest = Storage(result.checkpoint).read_json("manifest.json")
        figs["ckpt_mb"] = sum(manifest["files"].values()) / 1e6
        figs["stall_s"] = manifest["save_seconds"]
        figs["persist_s"] = manifest["persist_seconds"]
    if kills and kill_every is None:
        # The step seen before the kill may lag the real one by a poll: never below 0.
        figs["redone"] = max(0, kills[0][0] - out["start"])
        figs["restore_s"] = out["restore_s"]
    if config["report_steps"]:
        kill_times = [at for _, at in kills]
        figs["downtimes_s"] = lost_time.downtimes(result.metrics_history, kill_times)
        figs["breakdowns"] = lost_time.breakdown(result.metrics_history, kill_times)
        figs["lost"] = lost_time.lost_time(
            result.metrics_history, kill_times, epoch0, epoch0 + wall
        )
        # Each step's time from the attempt whose work was kept (a redone step's later
        # report replaces its earlier one); the median keeps each attempt's first,
        # traced step from counting as useful time.
        figs["useful_step_s"] = figs["lost"].get("useful_step_s", 0.0)
        figs["goodput_pct"] = figs["lost"].get("useful_pct", 0.0)
    return figs


def with_cpu_per_save(figs: dict, earlier: list[dict]) -> dict:
    """``figs`` with the CPU a save took on the chief (it writes and uploads), beyond the
    run without checkpoints: its CPU per step, less that run's, over a save's steps.
    How much of a core a save takes, where the stall says how long the loop waited."""
    base = next((f for f in earlier if f["mode"] == "none"), None)
    if base and base["cpu_per_step_s"] and figs["cpu_per_step_s"] and figs["cpu_saves"]:
        steps_per_save = figs["cpu_steps"] / figs["cpu_saves"]
        extra = figs["cpu_per_step_s"] - base["cpu_per_step_s"]
        figs["cpu_per_save_s"] = extra * steps_per_save
    return figs


def main(argv=None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.report:  # the page's section from an earlier run's JSON, dated by the file
        from raytf.bench import ft_report

        when = time.strftime("%Y-%m-%d", time.localtime(os.path.getmtime(args.report)))
        ft_report.write(args.report, args.out or "docs/benchmarks.md", when)
        return {}
    from raytf.group.cluster import ensure_ray

    parts = set(args.parts.split(","))
    names = args.stores.split(",") if args.sizes_mb and "sizes" in parts else []
    if "goodput" in parts and args.goodput_minutes > 0:
        names += [n for n in args.goodput_stores.split(",") if n not in ("local", *names)]
    # Before Ray starts: the workers inherit the loopback store's endpoint and keys.
    stores = sizes.Stores(names, args.s3_url) if names else None
    try:
        ensure_ray()
        return _run(args, stores)
    finally:
        if stores is not None:
            stores.close()


def _run(args, stores) -> dict:
    kill_at = 2 * args.checkpoint_every  # right on a save: the worst case for an async one
    figures: dict = {"storage": args.storage, "overhead": [], "recovery": [], "goodput": []}
    figures["results"] = []  # --sizes-mb rows (raytf.bench.sizes)
    figures["cost"] = []

    def show(kind: str, figs: dict) -> None:
        figures[kind].append(figs)
        shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in figs.items()}
        shown.pop("pairs_runs", None)
        print(f"bench checkpoints: {kind} {shown}", flush=True)

    modes = [m for m in args.modes.split(",") if m]
    parts = set(args.parts.split(","))
    if stores is not None and args.sizes_mb and "sizes" in parts:
        roots = {k: v for k, v in stores.roots.items() if k in args.stores.split(",")}
        sizes.run(args, roots, one_run, show)
    for workload in args.cost_workloads.split(",") if "cost" in parts else []:
        show("cost", cost.paired_runs(args, workload, one_run))
    for mode in modes if "overhead" in parts else []:
        show("overhead", with_cpu_per_save(one_run(args, mode), figures["overhead"]))
    median = _median_step(figures) + args.step_sleep  # a step's pace, a smoke run's sleep too
    if "recovery" in parts and args.recovery_kills > 1:
        show("recovery", series.run(args, kill_at, median, one_run))
    elif "recovery" in parts:
        copies = [True, False] if not Storage(args.storage).local else [True]
        for with_copies in copies:
            figs = one_run(args, "async+emergency", kill_at=kill_at, copies=with_copies)
            show("recovery", {**figs, "host_copies": with_copies})
    if args.goodput_minutes > 0 and "goodput" in parts:
        # As many steps as the minutes hold without failures (every rank must stop at
        # the same step, so the run is sized in steps, not timed).
        steps = args.goodput_steps or int(60 * args.goodput_minutes / median)
        for store in [s for s in args.goodput_stores.split(",") if s]:
            root = args.storage if store == "local" else stores.roots[store]
            figs = one_run(
                sizes.with_args(args, storage=root),
                "async+emergency",
                kill_every=args.kill_every,
                steps=steps,
            )
            figs["recovery_median_s"] = statistics.median(figs["recoveries_s"] or [0.0])
            show("goodput", {**figs, "store": store})
    figures.update(headline.headline(figures))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    return figures


def _median_step(figures: dict) -> float:
    """The model's median step, from the first run that measured one (what sizes the
    recovery and goodput runs), else 0.75 s (the W2 model's on this machine)."""
    for kind in ("overhead", "cost"):
        for figs in figures[kind]:
            if figs.get("median_step_s"):
                return figs["median_step_s"]
    return 0.75


if __name__ == "__main__":
    main()
