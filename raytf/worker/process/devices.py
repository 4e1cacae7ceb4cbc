"""Which devices a worker's TensorFlow sees, and which collectives it uses.

Ray assigns GPUs to an actor by id; TensorFlow must see exactly those (and a
CPU-only job must see none, or TF grabs every GPU of the node). These are pure
functions so the choice is unit-tested on a machine without GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence


def cuda_visible_devices(gpu_ids: Sequence[str | int], use_gpu: bool, expected: int) -> str:
    """The value of CUDA_VISIBLE_DEVICES for a worker.

    ``gpu_ids`` are the ids Ray assigned (``get_accelerator_ids()['GPU']``).
    An empty string hides all GPUs: what a CPU worker on a GPU node needs.
    """
    if not use_gpu:
        return ""
    ids = [str(i) for i in gpu_ids]
    if len(ids) != expected:
        raise RuntimeError(
            f"worker was promised {expected} GPU(s) but Ray assigned {len(ids)}: {ids}"
        )
    if len(set(ids)) != len(ids):
        raise RuntimeError(f"Ray assigned the same GPU twice: {ids}")
    return ",".join(ids)


def collective_implementation(use_gpu: bool) -> str:
    """NCCL between GPUs, RING (gRPC) between CPUs: MWMS's own recommendations."""
    return "NCCL" if use_gpu else "RING"
