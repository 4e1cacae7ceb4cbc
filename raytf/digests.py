"""The weights digest: the test oracle of every run, and what the example jobs print.

SHA-256 over the weights' bytes in order: two models have the same digest iff
their weights are bit-identical, so a resumed run is exact iff its digest
equals an uninterrupted run's, and every rank of a healthy MWMS group reports
the same one. Public so jobs need nothing from raytf's internals; NumPy only.
"""

from __future__ import annotations

import hashlib

import numpy as np


def weights_digest(variables) -> str:
    """SHA-256 of the weights in order (arrays, or variables NumPy can read).

    Args:
        variables (Iterable): The weights in a fixed order, e.g. ``model.get_weights()`` or
            ``model.weights``: NumPy arrays, tensors or variables ``np.asarray`` reads.
            The bytes are hashed, in this order: another dtype gives another digest,
            another shape over the same bytes does not.

    Returns:
        The digest as 64 lowercase hex characters.
    """
    h = hashlib.sha256()
    for v in variables:
        h.update(np.ascontiguousarray(np.asarray(v)).tobytes())
    return h.hexdigest()
