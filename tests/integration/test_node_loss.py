"""A node of a real multi-node cluster (`ray start` nodes) dies mid-run: the group moves to
the node that is left and finishes with the weights of an uninterrupted run (the
session's reference run, made on the session's cluster: the result must not depend on
where the workers ran)."""

import pytest

from .jobrun import FAULT_ARGS, JobRun, node_of, three_nodes

pytestmark = pytest.mark.slow


def test_killed_node_is_replaced_and_the_run_finishes_exactly(reference, tmp_path):
    with three_nodes() as cluster:
        env = cluster.client_env()
        run = JobRun(str(tmp_path), "node", *FAULT_ARGS, "--max-failures", "2", env=env)
        run.start()
        try:
            state = run.wait_for(step=70)
            victim = node_of(cluster, state, 1)
            cluster.kill_node(victim.index)
            rc, summary = run.finish()
        finally:
            run.stop()
        assert rc == 0, run.output()[-3000:]
        assert summary["attempts"] >= 2 and summary["failures"]
        assert summary["weights_digest"] == reference["weights_digest"]
        final_ips = {w["node_ip"] for w in run.state()["workers"]}
        assert victim.ip not in final_ips and len(final_ips) == 2
