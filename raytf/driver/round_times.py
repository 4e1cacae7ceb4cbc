"""How long the driver's rounds take: the control plane's cost, kept cheap to keep.

One round is one pass of the RUNNING state: poll every worker, take their
reports and checkpoint parts, check the watchdog and the resizer. Its time
grows with the number of workers (one actor call each); the benchmark's
control-plane test reads it. Only the most recent rounds are kept, so a run
of days holds a bounded list.
"""

from __future__ import annotations

from collections import deque


class RoundTimes:
    def __init__(self, keep: int = 4096):
        self._wall: deque[float] = deque(maxlen=keep)
        self._cpu: deque[float] = deque(maxlen=keep)
        self.count = 0

    def add(self, wall_s: float, cpu_s: float) -> None:
        """``wall_s`` includes waiting for the workers' answers; ``cpu_s`` is the
        driver thread's own CPU time in the round (its work, whatever the load)."""
        self._wall.append(wall_s)
        self._cpu.append(cpu_s)
        self.count += 1

    def summary_ms(self) -> dict[str, float]:
        if not self._wall:
            return {}
        wall, cpu = _quantiles_ms(self._wall), _quantiles_ms(self._cpu)
        return {
            "median": wall(0.5),
            "p90": wall(0.9),
            "max": wall(1.0),
            "cpu_median": cpu(0.5),
            "cpu_p90": cpu(0.9),
            "rounds": self.count,
        }


def _quantiles_ms(values):
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return at
