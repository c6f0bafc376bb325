"""The delays of one window (probes/loops/window.py): percentiles within a bucket of the truth."""

from __future__ import annotations

import math
import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from opentelemetry.instrumentation.process.metrics import METRICS
from opentelemetry.instrumentation.process.probes.loops.window import (
    BUCKET_RATIO,
    BUCKETS,
    NO_DELAYS,
    Delays,
    Window,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.floats(min_value=0, max_value=BUCKETS[-1], allow_nan=False),
        min_size=1,
        max_size=300,
    )
)
def test_percentiles_are_within_one_bucket_above_the_truth(lags: list[float]) -> None:
    window = Window()
    for lag in lags:
        window.add(lag)
    got = window.summary()
    ordered = sorted(lags)
    assert got.max == ordered[-1] and window.count == len(lags)
    assert got.mean is not None and math.isclose(got.mean, sum(lags) / len(lags), abs_tol=1e-9)
    for q, value in ((0.5, got.p50), (0.9, window.percentile(0.9)), (0.99, got.p99)):
        truth = ordered[math.ceil(q * len(ordered)) - 1]
        assert value is not None
        assert truth <= value <= max(truth * BUCKET_RATIO, truth + 1e-4), (q, truth, value)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=1.0, allow_nan=False), st.integers(1, 500)),
        max_size=30,
    )
)
def test_many_equal_delays_read_as_each_added_alone(runs: list[tuple[float, int]]) -> None:
    """What the probe adds for the ticks due in one wait, all as late as its wake, in one step."""
    counted, fed = Window(), Window()
    for delay, count in runs:
        counted.add_many(delay, count)
        for _ in range(count):
            fed.add(delay)
    assert (counted.count, counted.zeros, counted.max) == (fed.count, fed.zeros, fed.max)
    assert math.isclose(counted.total, fed.total, rel_tol=1e-9, abs_tol=1e-12)
    assert counted.buckets == fed.buckets
    assert counted.summary()._replace(mean=None) == fed.summary()._replace(mean=None)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 1000),
    st.lists(st.floats(min_value=1e-9, max_value=1.0, allow_nan=False), max_size=100),
    st.sampled_from([0.01, 0.5, 0.9, 0.99, 1.0]),
)
def test_a_quantile_among_the_zeros_reads_zero(zeros: int, lags: list[float], q: float) -> None:
    """Issue 35: 0 where the delays were exactly 0, not the first bucket's bound (0.1 ms)."""
    window = Window()
    if zeros:
        window.add_many(0.0, zeros)
    for lag in lags:
        window.add(lag)
    if not window.count:
        assert window.summary() == NO_DELAYS
        return
    ordered = sorted([0.0] * zeros + lags)
    truth = ordered[math.ceil(q * len(ordered)) - 1]
    got = window.percentile(q)
    if truth == 0.0:
        assert got == 0.0
    else:
        assert truth <= got <= max(truth * BUCKET_RATIO, truth + 1e-4)


def test_a_window_of_zeros_reads_zero_throughout() -> None:
    window = Window()
    window.add_many(0.0, 50)
    window.add(0.0)
    assert window.summary() == Delays(max=0.0, mean=0.0, p50=0.0, p99=0.0)
    assert (window.count, window.zeros, window.buckets[0]) == (51, 51, 51)
    # One small delay among 52: the p99 is the 52nd, its bucket's bound capped by the maximum.
    window.add(0.00003)
    assert window.summary() == Delays(max=0.00003, mean=0.00003 / 52, p50=0.0, p99=0.00003)
    assert window.percentile(1.0) == 0.00003


def test_an_empty_window_is_unknown_not_zero() -> None:
    got = Window().summary()
    assert got == NO_DELAYS == Delays(None, None, None, None)


def test_merged_windows_read_as_one_window_fed_every_sample() -> None:
    first = [0.0002, 0.0031, 0.0, 0.0007, 0.25]
    second = [0.0011, 0.0, 0.0, 0.0004, 0.09, 0.0002, 0.0005]
    a, b, whole = Window(), Window(), Window()
    for lag in first:
        a.add(lag)
        whole.add(lag)
    for lag in second:
        b.add(lag)
        whole.add(lag)
    a.merge(b)
    got = a.summary()
    every = first + second
    assert a.count == len(every)
    assert got.max == max(every)
    assert got.mean is not None and math.isclose(got.mean, statistics.fmean(every))
    assert a.buckets == whole.buckets and a.zeros == whole.zeros
    assert got == whole.summary()


def test_p99_of_a_long_window_leaves_out_its_top_one_percent() -> None:
    window = Window()
    for _ in range(199):
        window.add(0.001)
    window.add(0.5)
    window.add(150.0)  # above the last bucket (about 105 s)
    got = window.summary()
    # Buckets: 100 us * 2**(k/4); 0.001 s falls in the one up to 100 us * 2**3.5.
    bound = min(b for b in (1e-4 * 2 ** (k / 4) for k in range(81)) if b >= 0.001)
    # 201 samples: the 199th smallest is the p99, and it is 1 ms.
    assert got.p99 is not None and math.isclose(got.p99, bound)
    assert got.p50 is not None and math.isclose(got.p50, bound)
    assert got.max == 150.0 and window.count == 201
    # The top sample is above every bucket: its percentile is the window's maximum.
    assert window.percentile(1.0) == 150.0


def test_every_statistic_of_a_window_feeds_a_metric() -> None:
    """What a window reports is what the metric table reads from the delays source."""
    fed = {m.field for m in METRICS if m.source == "asyncio_loops"}
    assert set(Delays._fields) == fed == {"max", "mean", "p50", "p99"}
    assert sorted(Window.__slots__) == ["buckets", "count", "max", "total", "zeros"]
