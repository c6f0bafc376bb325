"""The delays of one loop over one window: count, sum, maximum and bucket counts.

Delays are in seconds. A percentile is the upper bound of its bucket, capped
by the window's maximum; 0 when it falls among the delays that were exactly 0
(ticks due while the loop slept and woke on time, or early for I/O).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import NamedTuple

# Bucket upper bounds: 100 us * 2**(k/4), up to about 105 s. A percentile is
# at most 19 % above the true value (2**0.25 = 1.189), or at most 100 us
# above it below 100 us.
BUCKET_RATIO = 2**0.25
BUCKETS: tuple[float, ...] = tuple(1e-4 * BUCKET_RATIO**k for k in range(81))


class Delays(NamedTuple):
    """One loop's delays over one window, in seconds; all ``None`` without a sample (never 0)."""

    max: float | None
    mean: float | None
    p50: float | None
    p99: float | None


NO_DELAYS = Delays(None, None, None, None)


class Window:
    """Delay samples of one window (filled by one loop's thread, read by another)."""

    __slots__ = ("buckets", "count", "max", "total", "zeros")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self.zeros = 0
        """Delays of exactly 0, also counted in the first bucket."""
        self.buckets = [0] * (len(BUCKETS) + 1)

    def add(self, delay: float) -> None:
        self.add_many(delay, 1)

    def add_many(self, delay: float, count: int) -> None:
        """``count`` delays of ``delay`` seconds each (``count`` >= 1)."""
        self.count += count
        if delay <= 0.0:
            self.zeros += count
            self.buckets[0] += count
            return
        self.total += delay * count
        if delay > self.max:
            self.max = delay
        self.buckets[bisect_left(BUCKETS, delay)] += count

    def merge(self, other: Window) -> None:
        self.count += other.count
        self.total += other.total
        self.zeros += other.zeros
        self.max = max(self.max, other.max)
        for i, n in enumerate(other.buckets):
            self.buckets[i] += n

    def percentile(self, q: float) -> float:
        """The upper bound of the bucket holding the ``q`` quantile, at most the maximum.

        0 when the quantile falls among the delays that were exactly 0.
        """
        rank = math.ceil(q * self.count)
        if rank <= self.zeros:
            return 0.0
        seen = 0
        for i, n in enumerate(self.buckets):
            seen += n
            if seen >= rank:
                return min(BUCKETS[i], self.max) if i < len(BUCKETS) else self.max
        return self.max

    def summary(self) -> Delays:
        if not self.count:
            return NO_DELAYS
        return Delays(
            max=self.max,
            mean=self.total / self.count,
            p50=self.percentile(0.50),
            p99=self.percentile(0.99),
        )
