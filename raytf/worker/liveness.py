"""Progress raytf sees for itself, and the phases it knows to be silent.

Why: the driver's hang decision rested on the loop's own calls (``report``,
``step_end``, ``heartbeat``), so TensorFlow's idiom -- ``model.fit`` with no
raytf call in it -- was declared hung after ``hang_timeout_s`` of healthy
training, and so was any long silent phase of a loop that does call them.

Training progress: every Keras optimizer (Keras 3's and tf_keras's) counts its
steps in an int64 scalar variable (``iteration``, tf_keras's legacy ``iter``).
The user's function runs under a ``tf.variable_creator_scope`` (public TF API)
that notes each such variable as it is made, and a thread of its own reads
them once a second (``RAYTF_PROGRESS_SAMPLE_S``): any change is progress.
Nothing runs on the loop's thread per step. The reads are on that thread,
never the poll thread's: on a GPU a read queues behind the step's kernels,
and behind a stuck collective it waits for good -- which is exactly the hang
the driver must still see, while the poll thread goes on answering (a
SIGSTOPped rank is still found by its silence, in ``unresponsive_timeout_s``).

Phases silent by nature are declared, each open phase's age travels in the
poll, and the driver times it against its own limit instead of
``hang_timeout_s`` (``raytf.driver.watchdog``): "start" (the function's start
to its first progress: data set-up, model build, first trace or compile), a
restore, a save, ``fit``'s first step (a new trace), ``evaluate`` and
``predict`` (``raytf.worker.fit.hooks``), and the loop's own
(``raytf.slow_phase``). A phase that ends is progress.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from raytf.messages import Phase
from raytf.settings import Settings

START = "start-up to the first step (data set-up, model build, first trace or compile)"

# Keras 3: "iteration" (under the optimizer's name scope); tf_keras: "iteration", or
# "iter" for its legacy optimizers. Uniquified names end in _<n>.
_COUNTER_NAME = re.compile(r"(^|/)(iteration|iterations|iter)(_\d+)?(:\d+)?$")


def is_step_counter(variable: Any) -> bool:
    """An optimizer's step counter: an int64 scalar named as Keras names it."""
    try:
        return (
            variable.dtype.name == "int64"
            and variable.shape.rank == 0
            and bool(_COUNTER_NAME.search(variable.name))
        )
    except (AttributeError, ValueError):
        return False


@dataclass
class _Open:
    """An open phase; ``since`` moves on at each progress inside it."""

    name: str
    since: float
    limit_s: float | None
    until_progress: bool  # ends at the first progress
    quiet: bool  # step counters it changes are a new baseline, not progress
    extra_s: float = 0.0  # added to its limit (``allow``)


class Liveness:
    """One worker's progress ticks and open phases; the poll reads ``view()``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, sample_s: float | None = None):
        self._clock = clock
        self._sample_s = sample_s  # None: RAYTF_PROGRESS_SAMPLE_S, read when the loop starts
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._open: dict[int, _Open] = {}
        self._quiet_gen = 0  # quiet phases opened or closed (a read across one is not progress)
        self._rebase = False  # a quiet phase closed: the next read is a new baseline
        self._counters: list[weakref.ref] = []
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self.ticks = 0  # progress seen: counter changes, steps, reports, phases ended

    def progressed(self) -> None:
        """Something moved: count it, close the phases that last until progress, and
        restart the others' clocks (a phase's age is how long it has been silent)."""
        now = self._clock()
        with self._lock:
            self.ticks += 1
            for key, phase in list(self._open.items()):
                if phase.until_progress:
                    del self._open[key]
                else:
                    phase.since = now

    @contextlib.contextmanager
    def phase(
        self,
        name: str,
        limit_s: float | None = None,
        until_progress: bool = False,
        quiet: bool = False,
        extra_s: float = 0.0,
    ) -> Iterator[None]:
        """Open a silent phase for the ``with`` block (or, ``until_progress``, until the
        first progress inside it). ``limit_s`` None: the driver's phase_timeout_s.
        ``quiet``: step counters it changes (a restore sets them) are not progress."""
        key = self.open(name, limit_s, until_progress, quiet, extra_s)
        try:
            yield
        finally:
            self.close(key)

    def open(
        self,
        name: str,
        limit_s: float | None = None,
        until_progress: bool = False,
        quiet: bool = False,
        extra_s: float = 0.0,
    ) -> int:
        with self._lock:
            key = next(self._ids)
            self._open[key] = _Open(name, self._clock(), limit_s, until_progress, quiet, extra_s)
            self._quiet_gen += quiet
        return key

    def allow(self, extra_s: float, name: str | None = None) -> None:
        """Give the phases open now ``extra_s`` more (renamed ``name``): work they did not
        know of when they opened, such as a resumed fit's skip through its input."""
        with self._lock:
            for phase in self._open.values():
                phase.extra_s += extra_s
                phase.name = name or phase.name

    def close(self, key: int) -> None:
        with self._lock:
            phase = self._open.pop(key, None)
            if phase is not None:
                self.ticks += 1
                if phase.quiet:
                    self._quiet_gen += 1
                    self._rebase = True

    def view(self) -> tuple[int, tuple[Phase, ...]]:
        """The ticks so far and each open phase with its age now."""
        now = self._clock()
        with self._lock:
            phases = tuple(
                Phase(p.name, now - p.since, p.limit_s, p.extra_s) for p in self._open.values()
            )
            return self.ticks, phases

    # -- the optimizers' step counters ----------------------------------------------
    def run(self, fn: Callable[[], Any]) -> Any:
        """Call the user's function under the "start" phase, noting the step counters
        its optimizers make; stop sampling when it returns."""
        if self._sample_s is None:
            self._sample_s = Settings.from_env().progress_sample_s
        # Imported by every real worker at its start; a TF-free stand-in (the control-plane
        # benchmark's) must not pay the import here.
        tf = sys.modules.get("tensorflow")
        key = self.open(START, until_progress=True)
        try:
            if tf is None or self._sample_s <= 0:
                return fn()
            with tf.variable_creator_scope(self._note):
                return fn()
        finally:
            self.close(key)
            self._stop.set()

    def _note(self, next_creator, **kwargs):
        variable = next_creator(**kwargs)
        if is_step_counter(variable):
            with self._lock:
                self._counters.append(weakref.ref(variable))
                start = self._sampler is None
                if start:
                    self._sampler = threading.Thread(
                        target=self._sample, daemon=True, name="raytf-liveness"
                    )
            if start:
                self._sampler.start()
        return variable

    def _read(self) -> int | None:
        """The counters' sum (None when none is readable): one small read each."""
        total, read = 0, False
        with self._lock:
            refs = list(self._counters)
        for ref in refs:
            variable = ref()
            if variable is None:
                continue
            try:
                total += int(variable.numpy())
                read = True
            except Exception:  # noqa: BLE001 - a deleted or uninitialised variable: skip it
                continue
        return total if read else None

    def _sample(self) -> None:
        last = self._read()
        while not self._stop.wait(self._sample_s):
            with self._lock:
                gen, rebase, self._rebase = self._quiet_gen, self._rebase, False
            value = self._read()
            if value is None:
                continue
            with self._lock:
                in_quiet = any(p.quiet for p in self._open.values())
                quiet = rebase or gen != self._quiet_gen or in_quiet
            if value != last and not quiet:
                self.progressed()
            last = value


_current: Liveness | None = None


def set_current(liveness: Liveness | None) -> None:
    global _current
    _current = liveness


def current() -> Liveness | None:
    """The running worker's liveness (None outside a raytf worker)."""
    return _current
