import pytest

from raytf.errors import UnsatisfiableResourcesError
from raytf.group.feasibility import check_satisfiable

TWO_NODES = [{"CPU": 4.0, "memory": 1e9}, {"CPU": 8.0, "GPU": 2.0}]


def test_fitting_groups_pass():
    check_satisfiable({"CPU": 1}, 10, "SPREAD", TWO_NODES)
    check_satisfiable({"CPU": 2, "GPU": 1}, 2, "PACK", TWO_NODES)
    check_satisfiable({"CPU": 4}, 2, "STRICT_PACK", TWO_NODES)
    check_satisfiable({"CPU": 4}, 2, "STRICT_SPREAD", TWO_NODES)


def test_too_big_for_any_node_names_resource_ask_and_largest():
    with pytest.raises(
        UnsatisfiableResourcesError, match=r"asks for 16 CPU.*largest node has 8 CPU"
    ):
        check_satisfiable({"CPU": 16}, 1, "SPREAD", TWO_NODES)


def test_missing_resource_says_no_node_has_it():
    with pytest.raises(UnsatisfiableResourcesError, match=r"4 TPU.*no node .* has any TPU"):
        check_satisfiable({"TPU": 4}, 1, "SPREAD", TWO_NODES)


def test_whole_cluster_too_small():
    with pytest.raises(UnsatisfiableResourcesError, match=r"fit 3 in all"):
        check_satisfiable({"CPU": 4}, 4, "SPREAD", TWO_NODES)


def test_strict_strategies():
    with pytest.raises(UnsatisfiableResourcesError, match="STRICT_PACK"):
        check_satisfiable({"CPU": 4}, 3, "STRICT_PACK", TWO_NODES)
    with pytest.raises(UnsatisfiableResourcesError, match="STRICT_SPREAD needs 3 nodes"):
        check_satisfiable({"CPU": 1}, 3, "STRICT_SPREAD", TWO_NODES)


def test_no_nodes():
    with pytest.raises(UnsatisfiableResourcesError, match="no alive nodes"):
        check_satisfiable({"CPU": 1}, 1, "SPREAD", [])
