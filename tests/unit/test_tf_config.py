import json

import pytest

from raytf.group.tf_config import build_tf_config, format_address, tf_config_json


def test_every_rank_sees_the_same_cluster_and_its_own_index():
    addrs = [("10.0.0.1", 2222), ("10.0.0.2", 2222), ("10.0.0.2", 2223)]
    configs = [build_tf_config(addrs, r) for r in range(3)]
    for rank, cfg in enumerate(configs):
        assert cfg["cluster"] == {"worker": ["10.0.0.1:2222", "10.0.0.2:2222", "10.0.0.2:2223"]}
        assert cfg["task"] == {"type": "worker", "index": rank}
    assert "chief" not in configs[0]["cluster"]  # MWMS: worker 0 is the chief


def test_json_round_trips():
    assert json.loads(tf_config_json([("h", 1)], 0))["task"]["index"] == 0


def test_ipv6_gets_brackets_and_hostnames_do_not():
    assert format_address("::1", 80) == "[::1]:80"
    assert format_address("node-a", 80) == "node-a:80"


@pytest.mark.parametrize(
    "addrs,rank,match",
    [
        ([], 0, "at least one"),
        ([("h", 1)], 1, "outside"),
        ([("h", 1)], -1, "outside"),
        ([("h", 1), ("h", 1)], 0, "share an address"),
        ([("h", 0)], 0, "port"),
        ([("h", 70000)], 0, "port"),
    ],
)
def test_bad_layouts_are_refused(addrs, rank, match):
    with pytest.raises(ValueError, match=match):
        build_tf_config(addrs, rank)


def test_port_clash_is_recognised_from_tf_errors():
    from raytf.worker.process.ports import is_port_clash, reserve_port

    # What TF 2.21 raises when its gRPC server cannot bind (seen here with a taken port).
    assert is_port_clash("UnknownError: Could not start gRPC server")
    assert is_port_clash("Failed to add port to server: No address added out of total 1 resolved")
    assert not is_port_clash("InvalidArgumentError: bad TF_CONFIG")
    sock = reserve_port()
    try:
        assert sock.getsockname()[1] > 0
    finally:
        sock.close()
