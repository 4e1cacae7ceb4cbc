"""Hand-made checkpoint parts for the unit tests of the driver's commits."""

import os

from raytf.checkpoint.layout import CKPT_DIR, stage_name, staged_dir, step_dirname
from raytf.messages import CheckpointPart
from raytf.rundir.storage import Storage


def write_parts(
    storage: Storage, step: int, world: int = 2, staged: bool = True
) -> list[CheckpointPart]:
    """What the workers do: the chief stages TF files, every rank its state file, each in
    a directory of its own (``staged=False``: into the step's directory, as writers did
    before staging, and as Tune seeds a checkpoint). On a local directory they write
    files, never through the driver's ``Storage`` (whose writes a test may make fail);
    on an object store they upload through it."""
    parts = []
    for rank in range(world):
        own = stage_name(rank) if staged else None
        where = (
            (CKPT_DIR, *staged_dir(storage, step, own))
            if staged
            else (CKPT_DIR, step_dirname(step))
        )
        data = {f"state_rank{rank}.json": b"{}"}
        if rank == 0:
            data.update({"ckpt.index": b"i" * 10, "ckpt.data-00000-of-00001": b"d" * 100})
        for name, blob in data.items():
            if storage.local:
                os.makedirs(storage.path(*where), exist_ok=True)
                with open(storage.path(*where, name), "wb") as f:
                    f.write(blob)
            else:
                storage.write_atomic(blob, *where, name)
        files = {name: len(blob) for name, blob in data.items()}
        parts.append(CheckpointPart(rank, step, files, 0.01, staged=own))
    return parts
