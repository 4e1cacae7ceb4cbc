"""Ray Tune over raytf: trials of 2 MWMS workers each on the session's cluster, ASHA
stopping the bad ones early; a stopped trial leaves no worker or reservation behind."""

import glob
import json
import os

import pytest
import ray

import jobs.tune_keras as tune_keras

from .cluster_state import alive_raytf_actors

pytestmark = pytest.mark.slow


def live_groups() -> dict:
    return {k: v for k, v in ray.util.placement_group_table().items() if v["state"] != "REMOVED"}


def test_three_trials_asha_stops_the_worst_and_nothing_remains(ray_cluster, storage):
    before = set(live_groups())
    # One trial at a time, so ASHA's decisions do not depend on timing: the first trial
    # sets the bar at each rung, the hopeless learning rate falls below it.
    summary = tune_keras.main(
        ["--lrs", "3e-3", "1e-6", "1e-3", "--steps", "128", "--storage", storage, "--name", "tune"]
    )
    trials = {t["config"]["lr"]: t for t in summary["trials"]}
    assert len(trials) == 3 and all(t["error"] is None for t in trials.values())
    assert summary["best_config"] == {"lr": 3e-3, "batch_size": 128}
    assert trials[3e-3]["iterations"] == 8 and not trials[3e-3]["stopped_early"]
    assert trials[1e-6]["stopped_early"] and trials[1e-6]["iterations"] == 2
    # Reports reached Tune as they came: one iteration per report of rank 0 (every 16 steps).
    assert trials[3e-3]["loss"] < trials[1e-6]["loss"]
    # The best trial's last committed raytf checkpoint (every 64 steps) was handed to Tune;
    # the stopped trial (32 steps) had none to hand.
    assert trials[3e-3]["checkpoint_step"] == 128
    assert trials[1e-6]["checkpoint_step"] is None
    # The stopped trial's driver tore its group down: its run says so, nothing is left.
    states = []
    for path in glob.glob(os.path.join(storage, "tune-*", "state.json")):
        with open(path) as f:
            st = json.load(f)
        states.append((st["last_step"], st["state"]))
    # The full trial ran all 128 steps (Tune may stop it at max_t as it finishes); the
    # hopeless one stopped right after its rung (32 steps), far from its first checkpoint.
    assert len(states) == 3 and max(step for step, _ in states) == 128, states
    assert any(step < 64 and state == "STOPPED" for step, state in states), states
    assert not alive_raytf_actors()
    assert set(live_groups()) <= before, live_groups()
