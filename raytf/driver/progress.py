"""The driver's live view of a run: one line, redrawn, with step, metrics and examples/s.

On a terminal or in a Jupyter notebook's cell the line is redrawn in place;
elsewhere (CI logs, ``ray job logs``) a line is printed every ``interval_s``
so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from raytf.messages import Report

_SHOWN_FIRST = ("loss", "accuracy")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def in_notebook(stream: Any) -> bool:
    """A Jupyter cell's output stream: it is no terminal, yet it redraws a line on ``\\r``."""
    return type(stream).__module__.startswith("ipykernel")


class Progress:
    def __init__(self, *, verbose: int = 1, interval_s: float = 2.0, stream: TextIO | None = None):
        self.verbose = verbose
        self.interval_s = interval_s
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) or in_notebook(self.stream)
        self.start = time.monotonic()
        self.last_metrics: dict[str, Any] = {}
        self.examples = 0
        self._rate_window: list[tuple[float, int]] = []
        self._last_draw = 0.0
        self._line_open = False
        self._printed: dict[str, Any] | None = None  # the metrics of the last line printed
        self._notices: set[str] = set()

    # -- inputs -------------------------------------------------------------
    def on_reports(self, reports: list[Report]) -> None:
        for report in reports:
            if report.rank != 0:
                continue
            self.last_metrics = report.metrics
            if report.examples:
                self.examples += int(report.examples)
                self._rate_window.append((report.time, self.examples))
                self._rate_window = self._rate_window[-20:]
        if reports:
            self._draw()

    def message(self, text: str) -> None:
        """A line of its own (state changes, waits), never overwritten."""
        if self.verbose == 0:
            return
        self._end_line()
        print(f"[raytf] {text}", file=self.stream, flush=True)

    def notice(self, text: str) -> None:
        """A changed behaviour (a feature that fell back): once a run, at any verbosity."""
        if text in self._notices:
            return
        self._notices.add(text)
        self._end_line()
        print(f"[raytf] warning: {text}", file=self.stream, flush=True)

    def waiting(self, what: str, waited_s: float) -> None:
        if self.verbose and (self.tty or waited_s - self._last_draw >= self.interval_s):
            self._write(f"[raytf] {what} ({waited_s:.0f} s)")
            self._last_draw = waited_s if not self.tty else self._last_draw

    # -- output ---------------------------------------------------------------
    def examples_per_s(self) -> float | None:
        if len(self._rate_window) < 2:
            return None
        (t0, n0), (t1, n1) = self._rate_window[0], self._rate_window[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else None

    def line(self) -> str:
        m = self.last_metrics
        parts = []
        if "step" in m:
            parts.append(f"step {m['step']}")
        parts += [f"{k} {_fmt(m[k])}" for k in _SHOWN_FIRST if k in m]
        parts += [
            f"{k} {_fmt(v)}"
            for k, v in m.items()
            if k not in _SHOWN_FIRST
            and k != "step"
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
        ][:4]
        rate = self.examples_per_s()
        if rate is not None:
            parts.append(f"{rate:,.0f} ex/s")
        parts.append(f"{time.monotonic() - self.start:.1f} s")
        return "[raytf] " + " | ".join(parts)

    def _draw(self, force: bool = False) -> None:
        if self.verbose == 0:
            return
        now = time.monotonic()
        if self.tty:
            if force or now - self._last_draw >= 0.1:
                self._write(self.line())
                self._last_draw = now
        elif (force or now - self._last_draw >= self.interval_s) and (
            self._printed is not self.last_metrics  # a log shows each report once
        ):
            self._end_line()
            print(self.line(), file=self.stream, flush=True)
            self._last_draw = now
            self._printed = self.last_metrics

    def _write(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K" + text)
            self.stream.flush()
            self._line_open = True
        else:
            print(text, file=self.stream, flush=True)

    def _end_line(self) -> None:
        if self._line_open:
            self.stream.write("\n")
            self.stream.flush()
            self._line_open = False

    def finish(self, summary: str) -> None:
        if self.verbose == 0:
            return
        if self.last_metrics:
            self._draw(force=True)
        self._end_line()
        print(f"[raytf] {summary}", file=self.stream, flush=True)
