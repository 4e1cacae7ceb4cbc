"""A node of a real multi-node cluster (`ray start` nodes) dies mid-run: the group moves to
the node that is left and finishes with the weights of an uninterrupted run."""

import pytest

from raytf.local_cluster import LocalCluster

from .jobrun import FAULT_ARGS, JobRun

pytestmark = pytest.mark.slow

# Faster dead-node detection than Ray's default, as an operator would tune a test cluster.
FAST_HEALTH_CHECK = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}


def test_killed_node_is_replaced_and_the_run_finishes_exactly(tmp_path):
    with LocalCluster(
        num_nodes=3, cpus_per_node=1, head_cpus=0, system_config=FAST_HEALTH_CHECK
    ) as cluster:
        env = cluster.client_env()
        ref = JobRun(str(tmp_path), "ref", *FAULT_ARGS, env=env).start()
        rc, reference = ref.finish()
        assert rc == 0, ref.output()[-3000:]

        run = JobRun(str(tmp_path), "node", *FAULT_ARGS, "--max-failures", "2", env=env)
        run.start()
        try:
            state = run.wait_for(step=70)
            victim_ip = next(w["node_ip"] for w in state["workers"] if w["rank"] == 1)
            victim = next(n for n in cluster.nodes if n.ip == victim_ip)
            cluster.kill_node(victim.index)
            rc, summary = run.finish()
        finally:
            run.stop()
        assert rc == 0, run.output()[-3000:]
        assert summary["attempts"] >= 2 and summary["failures"]
        assert summary["weights_digest"] == reference["weights_digest"]
        final_ips = {w["node_ip"] for w in run.state()["workers"]}
        assert victim_ip not in final_ips and len(final_ips) == 2
