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
    st.lists(st.floats(min_value=0, max_value=1.0, allow_nan=False), max_size=50),
    st.integers(min_value=0, max_value=10_000),
)
def test_ticks_on_time_count_as_delays_of_zero(lags: list[float], on_time: int) -> None:
    """What a parked probe adds for the ticks a loop slept through, in one step."""
    counted, fed = Window(), Window()
    for lag in lags:
        counted.add(lag)
        fed.add(lag)
    counted.add_on_time(on_time)
    for _ in range(on_time):
        fed.add(0.0)
    assert (counted.count, counted.total, counted.max) == (fed.count, fed.total, fed.max)
    assert counted.buckets == fed.buckets and counted.summary() == fed.summary()


def test_an_empty_window_is_unknown_not_zero() -> None:
    got = Window().summary()
    assert got == NO_DELAYS == Delays(None, None, None, None)


def test_merged_windows_read_as_one_window_fed_every_sample() -> None:
    first = [0.0002, 0.0031, 0.0007, 0.25]
    second = [0.0011, 0.0004, 0.09, 0.0002, 0.0005]
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
    assert a.buckets == whole.buckets
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
    assert sorted(Window.__slots__) == ["buckets", "count", "max", "total"]
