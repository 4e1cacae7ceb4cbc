"""The checks a configuration value goes through: the field named, the value shown.

A number a user gives must be what the code that uses it assumes, or it fails
far from where it was written: a NaN timeout compares false with every clock
(a hang declared at every poll, or a wait that never ends), an infinite one
waits forever. So every number is finite here unless its field says None
means "no limit", and the error names the field and the value.
"""

from __future__ import annotations

import math
from typing import Any

from raytf.errors import ConfigError


def check_resources(where: str, resources: dict[str, Any]) -> dict[str, float]:
    if not isinstance(resources, dict):
        raise ConfigError(f"{where} must be a dict of resource name to amount, got {resources!r}")
    checked: dict[str, float] = {}
    for name, amount in resources.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where} has a resource name {name!r}: names are non-empty strings")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise ConfigError(f"{where}[{name!r}] = {amount!r}: amounts are numbers")
        if not math.isfinite(amount) or amount < 0:
            raise ConfigError(f"{where}[{name!r}] = {amount!r}: amounts must be finite and >= 0")
        if name == "GPU" and amount > 1 and amount != int(amount):
            raise ConfigError(
                f"{where}['GPU'] = {amount!r}: above 1, GPUs per worker must be a whole number"
            )
        checked[name] = float(amount)
    return checked


def is_count(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 1


def positive_or_none(where: str, value: Any, integer: bool = False) -> None:
    if value is None:
        return
    kinds = (int,) if integer else (int, float)
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where} = {value!r}: must be finite; None means no limit")
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        what = "an integer" if integer else "a number"
        raise ConfigError(f"{where} = {value!r}: must be {what} > 0, or None")


def count_or_none(where: str, value: Any) -> None:
    """A whole number of things (steps, workers) >= 1, or None."""
    if value is not None and not is_count(value):
        raise ConfigError(f"{where} = {value!r}: must be an integer >= 1, or None")


def finite_number(where: str, value: Any, *, low: float = 0.0, low_ok: bool = False) -> None:
    """A finite number above ``low`` (or equal to it where ``low_ok``); never None."""
    fine = not isinstance(value, bool) and isinstance(value, (int, float))
    fine = fine and math.isfinite(value) and (value >= low if low_ok else value > low)
    if not fine:
        bound = f">= {low:g}" if low_ok else f"> {low:g}"
        raise ConfigError(f"{where} = {value!r}: must be a finite number {bound}")
