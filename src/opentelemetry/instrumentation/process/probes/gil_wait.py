"""GIL wait, sampled by one sleeping thread: how long a thread that becomes ready waits for the GIL.

A daemon thread sleeps a random time (uniform in ``[PERIOD/2, 3*PERIOD/2)``),
then tells whether, once its timer woke it, it had to wait for anything but
a CPU before it ran Python again:

- ``getrusage(RUSAGE_THREAD).ru_nvcsw`` (no file, the GIL kept) grows by
  exactly 1 over a sleep after which the thread ran at once: its one
  voluntary switch was the sleep. Waiting for the GIL blocks on a condition
  variable, a second voluntary switch; waiting for a CPU is no switch at all.
  So a wake with one switch waited for no GIL: 0, and nothing else is read.
- Otherwise its lateness (the monotonic clock after the sleep minus its due
  time), minus its own run-queue wait over the same time (``run_delay`` of
  ``/proc/thread-self/schedstat``) and the timer slack (:data:`SLACK_NS`), is
  its wait for the GIL.

``run_delay`` is read after such a wake, and after quiet wakes once what they
may have waited for a CPU (their lateness above the least seen) adds up to
:data:`BUDGET_NS`: a wait reads low by at most that, never high. With a CPU
so busy that the GIL's holder itself waits for one, the two stalls compound:
read the GIL wait after the run-queue wait (docs/stalls.md).

Totals run from the start (or the fork): samples, seconds waited, samples
that waited, and the longest wait since the previous read. Linux with a GIL
only (free-threaded builds run without one: not started). Nothing here knows
about OpenTelemetry.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import NamedTuple

from ..linux import schedstat

try:
    import resource
except ImportError:  # Windows: not started there
    resource = None  # type: ignore[assignment]

PERIOD = 0.2
"""Mean seconds between two samples; each sleep is uniform in ``[PERIOD/2, 3*PERIOD/2)``.

Five samples a second cost an idle process about 0.035 % of a core
(``benchmarks/gil_wait.py``); a fixed period would alias with periodic work.
"""
BUDGET_NS = 200_000
"""Most that a wait can read low (ns): the run-queue wait of quiet wakes not yet read."""
SLACK_NS = 50_000
"""The kernel's default timer slack for a thread (ns): a timer may fire that late."""
THREAD_NAME = "process-metrics-gil-wait"


def gil_enabled() -> bool:
    """Whether this interpreter runs with a GIL now (always before 3.13)."""
    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())


class GilWaitReading(NamedTuple):
    """The probe's totals since it started, and its longest wait since the previous read."""

    samples: int
    """Wakes of the probe."""
    seconds: float
    """The waits for the GIL of those wakes, added up, in seconds."""
    contended: int
    """Wakes that waited for the GIL at all."""
    longest: float | None
    """Longest single wait since the previous read, seconds; ``None`` if it did not wake since."""


class GilWait:
    """The sampling thread and its totals (see the module docstring)."""

    __slots__ = (
        "_contended",
        "_guard",
        "_longest",
        "_running",
        "_samples",
        "_since",
        "_stop",
        "_total_ns",
        "period",
    )

    def __init__(self, period: float = PERIOD) -> None:
        self.period = period
        self._guard = threading.Lock()  # read()'s take-and-zero of the longest wait
        self._stop = threading.Event()
        self._running = False
        self._samples = self._contended = self._total_ns = self._longest = self._since = 0

    @staticmethod
    def available() -> bool:
        """Whether it can run here: Linux, with a GIL, and ``getrusage(RUSAGE_THREAD)``."""
        return (
            sys.platform.startswith("linux")
            and gil_enabled()
            and hasattr(resource, "RUSAGE_THREAD")
        )

    def start(self) -> bool:
        """Start sampling; ``False``, and nothing started, where it cannot run.

        Raises ``OSError`` where the kernel keeps no ``schedstat``.
        """
        if not self.available():
            return False
        schedstat.this_thread_waiting_ns()
        try:
            threading.Thread(target=self._run, name=THREAD_NAME, daemon=True).start()
        except RuntimeError:  # at interpreter shutdown (a forked child's last collection)
            return False
        self._running = True
        return True

    def stop(self) -> None:
        """Stop at its next wake (at most 1.5 periods later); does not wait for it."""
        self._running = False
        self._stop.set()

    def read(self) -> GilWaitReading:
        """The totals now; the longest wait starts again from here."""
        with self._guard:
            longest, self._longest = self._longest, 0
        samples = self._samples
        woke = samples > self._since
        self._since = samples
        seconds = self._total_ns / 1e9
        return GilWaitReading(samples, seconds, self._contended, longest / 1e9 if woke else None)

    def forked(self) -> None:
        """In a forked child, before its first read: start again, and sample if the parent did.

        The thread did not survive the fork, and the parent's lock may have
        been held then: a new lock, zero totals and, if it ran, a new thread.
        """
        self._guard = threading.Lock()
        self._samples = self._contended = self._total_ns = self._longest = self._since = 0
        self._stop = threading.Event()
        if self._running:
            self.start()

    def _run(self) -> None:
        usage, who = resource.getrusage, resource.RUSAGE_THREAD
        sleep, clock = time.sleep, time.monotonic_ns
        waiting = schedstat.this_thread_waiting_ns
        stopped = self._stop.is_set
        period_ns = int(self.period * 1e9)
        nap_ns = period_ns
        last = waiting()
        floor = period_ns  # least lateness seen: the slack and the wake-up, no queueing
        owed = 0  # what quiet wakes may have waited for a CPU since ``last`` was read
        try:
            while not stopped():
                v0 = usage(who).ru_nvcsw
                t0 = clock()
                sleep(nap_ns / 1e9)
                t1 = clock()
                late = t1 - t0 - nap_ns
                if usage(who).ru_nvcsw - v0 > 1:  # blocked again after the timer: the GIL
                    now = waiting()
                    wait = late - (now - last) - SLACK_NS
                    last, owed = now, 0
                    if wait > 0:
                        self._add(wait)
                else:
                    floor = min(floor, late)
                    owed += late - floor
                    if owed > BUDGET_NS:
                        last, owed = waiting(), 0
                self._samples += 1
                # Uniform in [P/2, 3P/2): the clock's low digits follow nothing the program does.
                nap_ns = (period_ns >> 1) + t1 % period_ns
        except (OSError, ValueError):
            # schedstat went away or read empty (another mount namespace, a thread
            # on its way out): stop sampling. Nothing of ours reaches the program.
            return

    def _add(self, wait: int) -> None:
        self._total_ns += wait
        self._contended += 1
        if wait > self._longest:  # a new longest wait (rare): under read()'s guard
            with self._guard:
                self._longest = max(self._longest, wait)
