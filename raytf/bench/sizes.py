"""``raytf bench checkpoints --sizes-mb 300,1500 --stores local,s3``: checkpoints by size.

For each store and size, one run of the benchmark's MLP (``checkpoints.large_model``)
widened to a checkpoint of about that many MB (weights and Adam's two slots, 12
bytes a parameter), 2 workers, a checkpoint every ``--checkpoint-every`` steps,
rank 1 SIGKILLed after the second one; one row of ``results`` each:

- ``commit_s``: the driver's commit (median of the run's, from ``metrics.jsonl``):
  on an object store the parts stay where their writers put them and the commit
  is one small write, so it should not grow with the size;
- ``save_stall_s``: how long the training loop stood still for the last save
  (its manifest's ``save_seconds``; the write and upload go on behind it);
- ``restore_s``: the restarted rank's ``ctx.restore`` after the kill, read from
  the store itself (no host copy).

``s3`` is moto's S3 server on loopback (``raytf.bench.loopback_s3``, the test extra),
started here before Ray so that every worker inherits its endpoint and keys, or the
bucket ``--s3-url`` names (fsspec's environment). Whole runs on this machine's CPUs:
the sizes this machine's memory allows (each worker holds its model, its
optimizer and a copy for the asynchronous save).
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
import uuid

from raytf.rundir.run_log import read_run_log
from raytf.rundir.storage import Storage, join_run_dir, refresh_fsspec_env

BYTES_PER_PARAM = 12  # float32 weights, Adam's m and v
DEPTH = 1024  # the MLP's input and output width: the hidden width grows with the size


def width_for(size_mb: float, depth: int = DEPTH) -> int:
    """The hidden width whose MLP (depth-width-width-depth) has a checkpoint of about
    ``size_mb``: width**2 + 2*depth*width parameters."""
    params = size_mb * 1e6 / BYTES_PER_PARAM
    return max(8, round(-depth + math.sqrt(depth * depth + params)))


class Stores:
    """Where each store's runs go; the loopback S3 server started once, stopped by
    ``close``."""

    def __init__(self, names: list[str], s3_url: str | None):
        names = [n for n in names if n]
        self.roots: dict[str, str] = {}
        self.scratch = tempfile.mkdtemp(prefix="raytf-bench-sizes-")
        self.server = None
        self._saved: dict[str, str | None] = {}
        for name in names:
            if name == "local":
                self.roots[name] = os.path.join(self.scratch, "runs")
            elif name == "s3":
                self.roots[name] = s3_url or self._loopback()
            else:
                raise SystemExit(f"--stores: unknown store {name!r} (local, s3)")

    def _loopback(self) -> str:
        try:
            from raytf.bench.loopback_s3 import S3Server

            server = S3Server(self.scratch).start()
        except ModuleNotFoundError as exc:
            raise SystemExit(
                f"--stores s3 without --s3-url runs moto's S3 server on loopback ({exc}): "
                "pip install 'moto[server]' s3fs, or give --s3-url s3://bucket/prefix"
            ) from None
        self.server = server
        bucket = server.make_bucket(f"bench-{uuid.uuid4().hex[:8]}")
        env = {**server.env, "RAYTF_HOST_COPY_DIR": ""}  # restores read the bucket
        self._saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        refresh_fsspec_env()
        return f"s3://{bucket}/runs"

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        refresh_fsspec_env()
        shutil.rmtree(self.scratch, ignore_errors=True)


def commit_times(run_dir: str) -> list[float]:
    """Every commit's time, as the driver recorded it in the run's log."""
    records = read_run_log(Storage(run_dir))
    return [r["commit_s"] for r in records if r.get("type") == "checkpoint" and r.get("commit_s")]


def one_size(args, store: str, root: str, size_mb: float, one_run) -> dict:
    """One run at ``size_mb`` on ``store`` (``one_run``: ``checkpoints.one_run``)."""
    sized = with_args(args, storage=root, width=width_for(size_mb), depth=DEPTH)
    figs = one_run(sized, "async", kill_at=2 * args.checkpoint_every, copies=False)
    run_dir = join_run_dir(root, figs["name"])
    commits = commit_times(run_dir)
    row = {
        "size_mb": size_mb,
        "store": store,
        "commit_s": statistics.median(commits) if commits else None,
        "save_stall_s": figs.get("stall_s"),
        "restore_s": figs.get("restore_s"),
        # Beside the named keys: what the row measured.
        "ckpt_mb": figs.get("ckpt_mb"),
        "commits": len(commits),
        "commit_max_s": max(commits) if commits else None,
        "persist_s": figs.get("persist_s"),
        "median_step_s": figs["median_step_s"],
        "redone": figs.get("redone"),
        "wall_s": figs["wall_s"],
    }
    Storage(run_dir).remove()  # a 1.5 GB run is not left on the store
    return row


def with_args(args, **changes):
    """A copy of the parsed arguments ``args`` with ``changes``."""
    import argparse

    return argparse.Namespace(**{**vars(args), **changes})


def run(args, roots: dict[str, str], one_run, show) -> list[dict]:
    """Every store at every size, smallest first, stores alternated; ``show`` prints
    each row as it lands (and keeps it in the JSON's ``results``)."""
    rows = []
    for size in sorted(float(s) for s in args.sizes_mb.split(",") if s):
        for name, root in roots.items():
            rows.append(one_size(args, name, root, size, one_run))
            show("results", rows[-1])
    return rows
