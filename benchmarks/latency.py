"""How late a thread that wakes every 2 ms runs while collections hold the GIL.

Collections run back to back in the main thread, for one configuration at a
time, in blocks that alternate (and a block with no collection, for the
machine's own noise). A ticker thread sleeps 2 ms at a time and records how
much later than asked it woke. CPU-bound Python in a collection keeps the GIL
until the interpreter's switch interval (5 ms) hands it over, so the lateness
shows how long a collection holds it in one stretch.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from subjects import Subject

TICK = 0.002
IDLE = "no collections"


@dataclass(frozen=True)
class Lateness:
    """How late the ticker woke, in ms, while ``config`` collected back to back."""

    config: str
    wakeups: int
    collections: int
    p50_ms: float
    p99_ms: float
    max_ms: float


class _Ticker(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="bench-ticker", daemon=True)
        self.label = IDLE
        self.late: dict[str, list[float]] = {}
        self.done = threading.Event()

    def run(self) -> None:
        clock = time.perf_counter
        while not self.done.is_set():
            label, started = self.label, clock()
            time.sleep(TICK)
            self.late.setdefault(label, []).append(clock() - started - TICK)


def measure(timed: Sequence[Subject], seconds: float, blocks: int) -> list[Lateness]:
    """``blocks`` rounds of ``seconds`` per subject, and as long with no collections."""
    ticker = _Ticker()
    ticker.start()
    runs: dict[str, int] = {IDLE: 0}
    try:
        for _ in range(blocks):
            for s in [None, *timed]:
                label = IDLE if s is None else s.name
                ticker.label = label
                runs[label] = runs.get(label, 0) + _collect_for(s, seconds)
    finally:
        ticker.done.set()
        ticker.join()
    return [_summary(label, ticker.late.get(label, []), runs[label]) for label in runs]


def _collect_for(s: Subject | None, seconds: float) -> int:
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        if s is None:
            time.sleep(TICK)
            continue
        s.collect()
        n += 1
    return n


def _summary(label: str, late: list[float], collections: int) -> Lateness:
    ms = sorted(x * 1e3 for x in late) or [0.0]
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    return Lateness(label, len(late), collections, statistics.median(ms), p99, ms[-1])
