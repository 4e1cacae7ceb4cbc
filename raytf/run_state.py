"""The run's state on disk (``RUN_DIR/state.json``), for operators and tests.

Written by the driver at every state change, atomically (write, then rename),
so ``raytf status RUN_DIR`` always reads a whole document, even mid-write or
after the driver died.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

STATE_FILE = "state.json"


def write_json_atomic(path: str, doc: Any) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@dataclass
class RunState:
    name: str
    run_dir: str
    state: str = "SCHEDULING"
    attempt: int = 0
    num_workers: int = 0
    driver_pid: int = field(default_factory=os.getpid)
    workers: list[dict[str, Any]] = field(default_factory=list)
    last_step: int | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    updated: float = 0.0

    def save(self) -> None:
        self.updated = time.time()
        write_json_atomic(os.path.join(self.run_dir, STATE_FILE), asdict(self))


def read_state(run_dir: str) -> dict[str, Any]:
    path = os.path.join(run_dir, STATE_FILE)
    with open(path) as f:
        return json.load(f)
