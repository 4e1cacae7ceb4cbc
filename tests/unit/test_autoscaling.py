"""What the driver concludes about a cluster with an autoscaler (Ray calls faked)."""

import pytest

from raytf.config import ScalingConfig
from raytf.errors import UnsatisfiableResourcesError
from raytf.group import autoscaler as autoscaling
from raytf.group import cluster, feasibility

pytestmark = pytest.mark.unit

CONFIG = """
head_node_type: head
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  gpu: {resources: {CPU: 8, GPU: 1}, node_config: {}, max_workers: 3}
"""


@pytest.fixture
def config_file(tmp_path, monkeypatch):
    path = tmp_path / "autoscaling.yaml"
    path.write_text(CONFIG)
    monkeypatch.setenv("RAYTF_AUTOSCALER_CONFIG", str(path))
    monkeypatch.setattr(cluster, "alive_node_resources", lambda: [{"CPU": 0}])
    return path


def test_node_types_exclude_the_head_and_count_up_to_max_workers(config_file):
    types = autoscaling.node_types()
    assert list(types) == ["gpu"]
    nodes = autoscaling.potential_nodes([{"CPU": 0}], types)
    assert nodes == [{"CPU": 0}] + [{"CPU": 8, "GPU": 1}] * 3


def test_group_the_autoscaler_can_grow_into_passes_and_one_it_cannot_fails(config_file):
    feasibility.check_cluster(ScalingConfig(num_workers=3, use_gpu=True))
    with pytest.raises(UnsatisfiableResourcesError, match="autoscaler could add.*gpu"):
        feasibility.check_cluster(ScalingConfig(num_workers=4, use_gpu=True))
    with pytest.raises(UnsatisfiableResourcesError, match="2 GPU"):
        feasibility.check_cluster(
            ScalingConfig(num_workers=1, use_gpu=True, resources_per_worker={"GPU": 2})
        )


def test_unknown_node_types_mean_wait_and_no_autoscaler_means_live_nodes_only(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(cluster, "alive_node_resources", lambda: [{"CPU": 2}])
    monkeypatch.setattr(autoscaling, "autoscaler_running", lambda: True)
    monkeypatch.setattr(autoscaling, "node_types", lambda: None)
    feasibility.check_cluster(ScalingConfig(num_workers=8, use_gpu=True))  # may come: wait
    monkeypatch.setattr(autoscaling, "autoscaler_running", lambda: False)
    with pytest.raises(UnsatisfiableResourcesError, match="no node of the cluster has any GPU"):
        feasibility.check_cluster(ScalingConfig(num_workers=1, use_gpu=True))


def test_a_read_only_monitor_is_not_an_autoscaler():
    read_only = {"autoscaler_report": {"active_nodes": {"node_78c201c352a4": 1}}}
    fake = {"autoscaler_report": {"active_nodes": {"ray.head.default": 1}}}
    launching = {"autoscaler_report": {"active_nodes": {}, "pending_launches": {"gpu": 2}}}
    assert not autoscaling.reports_node_types(read_only)
    assert autoscaling.reports_node_types(fake)
    assert autoscaling.reports_node_types(launching)
    assert not autoscaling.reports_node_types({})
