"""A node whose raylet refuses a connection is dead, whatever Ray's records still say
(they call a killed node alive until its health checks fail); one that accepts is not,
one that does not answer in time proves nothing, and a question that fails names no
node dead."""

import socket

import pytest

from raytf.group import cluster


def record(node_id: str, port: int) -> dict:
    return {"NodeID": node_id, "Alive": True, "NodeManagerAddress": "127.0.0.1",
            "NodeManagerPort": port}  # fmt: skip


def test_a_refused_raylet_port_is_a_dead_node_and_a_listening_one_is_not(monkeypatch):
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, never listening: a connection is refused
        nodes = [record("up", listening.getsockname()[1]), record("gone", closed.getsockname()[1])]
        monkeypatch.setattr(cluster, "alive_nodes", lambda: nodes)
        assert cluster.refusing_nodes({"up", "gone"}) == {"gone"}
        assert cluster.refusing_nodes({"up"}) == set()  # only the nodes asked about
        assert cluster.refusing_nodes(set()) == set()


@pytest.mark.parametrize("error", [TimeoutError, OSError(113, "No route to host")])
def test_an_address_that_does_not_answer_proves_nothing(monkeypatch, error):
    """As from a machine that is gone, or a driver outside the cluster's network."""

    def no_answer(address, timeout):
        raise error

    monkeypatch.setattr(cluster, "alive_nodes", lambda: [record("far", 9)])
    monkeypatch.setattr(cluster.socket, "create_connection", no_answer)
    assert cluster.refusing_nodes({"far"}) == set()


def test_a_question_that_fails_names_no_node_dead(monkeypatch):
    def broken():
        raise RuntimeError("GCS unavailable")

    monkeypatch.setattr(cluster, "alive_nodes", broken)
    assert cluster.refusing_nodes({"any"}) == set()
