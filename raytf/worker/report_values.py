"""What a report may carry: plain Python values, checked where ``report`` is called.

Plain values travel cheaply over Ray and print well; tensors and NumPy values do
neither, and a value that is not a metric (a dict, an object) would be stored,
plotted and compared as something it is not.
"""

from __future__ import annotations

from typing import Any


def _to_python(value: Any) -> Any:
    """Plain Python values travel cheaply and print well; tensors and numpy do neither."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "item") and getattr(value, "shape", None) in ((), None):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


_PLAIN = (bool, int, float, str, type(None))


def _is_plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    return isinstance(value, _PLAIN)


def clean_metrics(metrics: Any, rank: int) -> dict[str, Any]:
    """Metrics as plain Python values, or a TypeError naming the key, the rank and the type.

    Checked where ``report`` is called, so a bad value fails at its source line
    instead of being stored, plotted and compared as something it is not.
    """
    if not isinstance(metrics, dict):
        raise TypeError(f"report() takes a dict of metrics, got {type(metrics).__name__}")
    clean = {}
    for key, value in metrics.items():
        plain = _to_python(value)
        if not _is_plain(plain):
            raise TypeError(
                f"report(): metric {key!r} on rank {rank} is a {type(value).__name__}; "
                "metrics must be numbers (or strings, bools, lists of them, scalar tensors)"
            )
        clean[str(key)] = plain
    return clean
