"""What raytf's defaults cost a step, against protection off, from paired runs.

``raytf bench checkpoints --parts cost``: for each ``--cost-workloads`` entry,
``--cost-pairs`` pairs of whole runs, one with raytf's defaults as a user gets them
(``Trainer`` given no failure or checkpoint config: raytf's own checkpoint interval,
emergency checkpoints at their measured cadence, standby processes) and one with
protection off (``max_failures=0``, ``default_interval=False``: no checkpoints, no
emergency copies, no standbys), back to back, their order alternating
(``raytf.bench.paired``). A run's figure is its loop's mean step after 5 warm-up
steps (the saves and copies included, unlike a median); the cost is the mean of the
pairs' ratios with its 95 % interval, the same from the median step beside it
(what the per-step work costs, the saves left out), and each run's wall time
(``fit()`` to its return) beside its loop's.

Workloads (the loop of ``raytf.bench.checkpoints``: a custom training loop):

- ``w2``: the bench's model as given (by default the 25.2M-parameter MLP, a 302 MB
  checkpoint), ``--cost-steps`` steps a run (120): long enough for raytf's first timed
  save (its interval is at least 60 s) to land in it;
- ``mlp``: a 256-wide MLP (0.2M parameters), 40 times the steps: the per-step
  work at a step of milliseconds, where a fixed cost per step shows most (no save
  lands in its seconds-long runs).
- ``fit``: TensorFlow's ``fit`` idiom (``raytf.bench.fit_idiom``: Keras's own
  ``model.fit``, no raytf call in the loop), a 256-wide MLP, 40 times the steps.
"""

from __future__ import annotations

from raytf.bench import paired
from raytf.bench.sizes import with_args

WORKLOADS = ("w2", "mlp", "fit")


def _workload_args(args, workload: str):
    if workload == "w2":
        return with_args(args, steps=args.cost_steps, goodput_minutes=0)
    if workload in ("mlp", "fit"):
        return with_args(args, steps=40 * args.cost_steps, width=256, depth=256)
    raise SystemExit(f"--cost-workloads: unknown workload {workload!r} ({', '.join(WORKLOADS)})")


def _loop(workload: str):
    """The workload's training function; None: the bench's own custom loop."""
    if workload == "fit":
        from raytf.bench.fit_idiom import fit_loop

        return fit_loop
    return None


def paired_runs(args, workload: str, one_run) -> dict:
    """``args.cost_pairs`` pairs of runs of ``workload`` (``one_run``:
    ``checkpoints.one_run``); the cost from their mean steps and from their medians."""
    wargs, fn = _workload_args(args, workload), _loop(workload)
    arms = {"treated": "defaults", "base": "off"}
    pairs, medians, runs = [], [], []
    for i in range(args.cost_pairs):
        figs = {}
        for arm in paired.order(i):
            figs[arm] = one_run(wargs, arms[arm], copies=True, fn=fn)
            runs.append(
                {
                    "pair": i,
                    "arm": arms[arm],
                    "mean_step_s": figs[arm]["mean_step_s"],
                    "median_step_s": figs[arm]["median_step_s"],
                    "wall_s": figs[arm]["wall_s"],
                    "checkpoints": figs[arm].get("ckpt_mb") is not None,
                }
            )
        pairs.append((figs["treated"]["mean_step_s"], figs["base"]["mean_step_s"]))
        medians.append((figs["treated"]["median_step_s"], figs["base"]["median_step_s"]))
    by_mean, by_median = paired.cost_pct(pairs), paired.cost_pct(medians)
    base = sorted(b for _, b in pairs)
    return {
        "workload": workload,
        "steps": wargs.steps,
        "cost_pct": by_mean["cost_pct"],
        "ci_pct": by_mean["ci_pct"],
        "pairs": by_mean["pairs"],
        "pairs_pct": by_mean["pairs_pct"],
        "median_cost_pct": by_median["cost_pct"],
        "median_ci_pct": by_median["ci_pct"],
        "median_step_s": base[len(base) // 2],  # protection off: the model's own step
        "pairs_runs": runs,
    }
