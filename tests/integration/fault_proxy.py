"""A TCP proxy on loopback in front of the S3 server, switched between faults by the test.

Storage that fails rather than pauses: every client (the driver, each worker)
reaches the store through ``FSSPEC_S3_ENDPOINT_URL`` set to this proxy, as it
would reach a real endpoint behind a load balancer. Modes, each applied to the
connections opened after the switch (a switch closes the open ones, so pooled
keep-alive connections meet the new mode at their next request):

- ``pass``: bytes forwarded both ways;
- ``503``: each request read whole and answered ``503 SlowDown``, as S3 does
  when it throttles;
- ``reset``: the connection reset (RST) as soon as it is accepted;
- ``slow``: forwarded, each chunk held ``SLOW_S`` first;
- ``narrow``: forwarded at ``NARROW_BYTES_S`` each way per connection (a distant
  region's link: a checkpoint of tens of MB takes seconds to go up);
- ``stall``: accepted, never answered (a partition, an overloaded store).

``met`` counts the connections each mode served, so a test can show the
faults reached requests.
"""

from __future__ import annotations

import collections
import socket
import struct
import threading
import time

HOST = "127.0.0.2"
SLOW_S = 0.3
NARROW_BYTES_S = 3e6
_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


class FaultProxy:
    MODES = ("pass", "503", "reset", "slow", "stall", "narrow")

    def __init__(self, target_port: int, target_host: str = HOST):
        self.target = (target_host, target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((HOST, 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.endpoint = f"http://{HOST}:{self.port}"
        self.mode = "pass"
        self.met: collections.Counter = collections.Counter()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> FaultProxy:
        threading.Thread(target=self._accept, daemon=True, name="fault-proxy").start()
        return self

    def set(self, mode: str) -> None:
        assert mode in self.MODES, mode
        with self._lock:
            self.mode = mode
            sockets, self._open = list(self._open), set()
        for s in sockets:  # pooled connections reconnect and meet the new mode
            _close(s)

    def stop(self) -> None:
        self._closed = True
        self.set("pass")
        _close(self.listener)

    # -- connections ----------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _keep(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._open.update(sockets)

    def _serve(self, client: socket.socket) -> None:
        mode = self.mode
        self.met[mode] += 1
        if mode == "reset":
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            return
        self._keep(client)
        if mode == "stall":
            while self.mode == "stall" and not self._closed:
                time.sleep(0.1)
            _close(client)
            return
        if mode == "503":
            self._slow_down(client)
            return
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            _close(client)
            return
        upstream.settimeout(None)
        self._keep(upstream)
        delay = SLOW_S if mode == "slow" else 0.0
        per_byte = 1 / NARROW_BYTES_S if mode == "narrow" else 0.0
        pump = (upstream, client, delay, per_byte)
        threading.Thread(target=_pump, args=pump, daemon=True).start()
        _pump(client, upstream, delay, per_byte)

    def _slow_down(self, client: socket.socket) -> None:
        """Read one request whole, answer 503 SlowDown, close."""
        client.settimeout(10)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = client.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, body = data.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(body) < length:
                chunk = client.recv(65536)
                if not chunk:
                    return
                body += chunk
            head_only = head.split(b" ", 1)[0] == b"HEAD"  # a HEAD answer has no body
            client.sendall(
                b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                + f"Content-Length: {len(_SLOW_DOWN)}\r\n".encode()
                + b"Connection: close\r\n\r\n"
                + (b"" if head_only else _SLOW_DOWN)
            )
        except OSError:
            pass
        finally:
            _close(client)


def _pump(src: socket.socket, dst: socket.socket, delay: float, per_byte: float = 0.0) -> None:
    try:
        while True:
            chunk = src.recv(65536)
            if not chunk:
                break
            if delay or per_byte:
                time.sleep(delay + per_byte * len(chunk))
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
