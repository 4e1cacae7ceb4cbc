"""Who besides the controller hears what the workers say, passed in when it is built."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from raytf.messages import Reply


@dataclass(frozen=True)
class Listeners:
    """Who else hears what the workers say: a Tune trial (rank 0's metrics), a Session
    (its commands' replies). Called on the driver's thread: they must return at once."""

    on_report: Callable[[dict], None] | None = None
    on_reply: Callable[[Reply], None] | None = None
