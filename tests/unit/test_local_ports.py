"""Ports for ``raytf local``'s nodes: distinct, never handed out twice, free on every
local address (real sockets on this machine, no cluster)."""

import socket

from raytf.tools.local.cluster import free_ports


def test_ports_picked_together_are_distinct_and_skip_those_taken():
    first = free_ports(40, set())
    assert len(set(first)) == 40
    second = free_ports(40, set(first))
    assert len(set(second)) == 40 and not set(first) & set(second)


def test_a_port_held_on_one_loopback_address_only_is_not_picked():
    # As Ray's dashboard agent holds its port on 127.0.0.1 beside the node's address.
    held = []
    try:
        for _ in range(400):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            held.append(sock)
        busy = {s.getsockname()[1] for s in held}
        # 400 picks bound to another loopback address would land on ~6 of these.
        assert not set(free_ports(400, set())) & busy
    finally:
        for sock in held:
            sock.close()


def test_a_fresh_machine_gets_a_ray_token_once(tmp_path, monkeypatch):
    """`ray start` with token auth refuses to make the token that `ray.init` would: the
    first `raytf local up` on a fresh machine failed until some other Ray call made it."""
    from raytf.tools.local.cluster import ensure_auth_token

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    token = tmp_path / ".ray" / "auth_token"
    ensure_auth_token()
    first = token.read_text()
    assert len(first.strip()) >= 32
    ensure_auth_token()
    assert token.read_text() == first  # kept: clusters already started use it
