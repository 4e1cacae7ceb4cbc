"""A per cent from paired runs, with its 95 % confidence interval.

Two arms of whole runs on 2 shared cores differ by a few per cent from one run to
the next, more than the cost being measured (``max_failures=0`` against the
defaults: 18-24 ms steps in each arm, unpaired medians of 3 could not tell 2 %
from 10 %). So the arms run in pairs, back to back, their order alternating
(a slow spell of the machine lands on both arms of a pair, and neither arm is
always first), and the figure is the mean of the pairs' own ratios, with a
Student t interval over them: it says when the pairs are too few to tell.
"""

from __future__ import annotations

import math
import statistics

# Two-sided 95 % quantiles of Student's t by degrees of freedom (1-30); past 30,
# the normal's 1.96 is within 4 %.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t95(df: int) -> float:
    """Student's t two-sided 95 % quantile for ``df`` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, not {df}")
    return _T95[df - 1] if df <= len(_T95) else 1.96


def order(pair: int) -> tuple[str, str]:
    """Which arm runs first in pair ``pair``: ("treated", "base") on even pairs."""
    return ("treated", "base") if pair % 2 == 0 else ("base", "treated")


def cost_pct(pairs: list[tuple[float, float]]) -> dict:
    """The treated arm's cost over the base, per cent, from (treated, base) pairs of a
    per-step time: the mean of the pairs' ``100 * (treated / base - 1)``, the half-width
    of its 95 % interval (None with one pair), and each pair's own figure."""
    if not pairs or any(b <= 0 for _, b in pairs):
        raise ValueError(f"pairs need a positive base: {pairs!r}")
    each = [100.0 * (t / b - 1.0) for t, b in pairs]
    mean = statistics.fmean(each)
    half = None
    if len(each) > 1:
        half = t95(len(each) - 1) * statistics.stdev(each) / math.sqrt(len(each))
    return {"cost_pct": mean, "ci_pct": half, "pairs_pct": each, "pairs": len(each)}
