"""Pick a port for a worker's TF server and hold it until TF binds it.

Picking a free port and closing it before TF binds is racy (ray-project/ray#34271):
another process can take it in between. The socket returned here is bound with
SO_REUSEADDR but never listens, which the Linux kernel lets gRPC's listener
(also SO_REUSEADDR) bind over, while ``bind(port 0)`` elsewhere skips the port.
Closing it once the strategy is up ends the window. A clash can still happen
(another process binding the exact number): the worker group detects it and
restarts on new ports.
"""

from __future__ import annotations

import socket


def reserve_port(host: str = "") -> socket.socket:
    """A bound, non-listening socket on a free port; ``getsockname()[1]`` is the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    return sock


def is_port_clash(error_text: str) -> bool:
    """Does a strategy-creation error mean the TF server could not bind its port?"""
    text = error_text.lower()
    return any(
        marker in text
        for marker in (
            "address already in use",
            "could not start grpc server",
            "failed to add port",
            "unable to bind",
        )
    )
