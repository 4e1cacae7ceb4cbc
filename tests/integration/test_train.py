"""Two real MWMS workers on a real local Ray instance."""

import jobs.train_synthetic as train_synthetic

from .cluster_state import assert_nothing_left

ARGS = ["--workers", "2", "--steps", "48", "--report-every", "8", "--seed", "7"]


def test_loss_falls_digests_agree_and_a_fixed_seed_repeats(ray_cluster, storage):
    first = train_synthetic.main(ARGS + ["--storage", storage, "--name", "a"])
    second = train_synthetic.main(ARGS + ["--storage", storage, "--name", "b"])

    assert first["steps"] == 48 and first["attempts"] == 1
    assert first["digests_agree"], "workers ended with different weights"
    assert first["weights_digest"] == second["weights_digest"], "same seed, different result"
    assert second["digests_agree"]

    import json
    import os

    with open(os.path.join(storage, "a", "state.json")) as f:
        state = json.load(f)
    assert state["state"] == "FINISHED" and state["last_step"] == 48
    assert sorted(w["rank"] for w in state["workers"]) == [0, 1]
    assert len({w["pid"] for w in state["workers"]}) == 2


def test_loss_history_streams_and_falls(ray_cluster, storage):
    import raytf

    trainer = raytf.Trainer(
        train_synthetic.train_loop,
        train_loop_config={"steps": 64, "batch_size": 64, "seed": 1, "report_every": 4, "lr": 3e-3},
        scaling_config=raytf.ScalingConfig(num_workers=2),
        run_config=raytf.RunConfig(name="hist", storage_path=storage, verbose=0),
    )
    result = trainer.fit()
    losses = [m["loss"] for m in result.metrics_history]
    assert [m["step"] for m in result.metrics_history] == list(range(4, 65, 4))
    assert losses[-1] < 0.6 * losses[0], losses
    assert result.metrics["accuracy"] > 0.6
    assert_nothing_left()
