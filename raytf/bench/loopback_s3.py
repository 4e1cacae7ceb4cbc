"""A real S3-compatible endpoint on loopback: moto's server mode, in a process of its own.

What ``raytf bench checkpoints --stores s3`` measures against, and the tests' S3
(``moto[server]``, the test extra: not installed with raytf). The tests and the
bench reach it through s3fs exactly as a user reaches S3 (``FSSPEC_S3_ENDPOINT_URL``
and credentials in the environment), never through a patched client. Its own process
so a test can stop it (SIGSTOP: the endpoint stops answering, as a network partition
or an overloaded store does) and resume it, and the fixture ends it by pid.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HOST = "127.0.0.2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class S3Server:
    def __init__(self, log_dir: str):
        self.port = _free_port()
        self.endpoint = f"http://{HOST}:{self.port}"
        self.log_path = os.path.join(log_dir, "moto.log")
        self.proc: subprocess.Popen | None = None
        self.env = {
            "FSSPEC_S3_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def start(self) -> S3Server:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(self.port)],
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.endpoint, timeout=1)
                return self
            except OSError:
                assert self.proc.poll() is None, open(self.log_path).read()[-2000:]
                assert time.monotonic() < deadline, "moto server did not start in 30 s"
                time.sleep(0.2)

    def filesystem(self):
        import s3fs

        return s3fs.S3FileSystem(
            key="testing",
            secret="testing",
            endpoint_url=self.endpoint,
            use_listings_cache=False,
            skip_instance_cache=True,
        )

    def make_bucket(self, name: str) -> str:
        self.filesystem().mkdir(name)
        return name

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
