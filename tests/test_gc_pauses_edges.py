"""GC pause recorder, the edges: reset mid-collection, deep nesting, every pause in a bucket.

Counts are checked against CPython's own ``gc.get_stats()``; where a situation
cannot be produced on this interpreter (collections nested deeper than the
timed depth), the callback is driven as CPython would drive it, with a clock
of the test's own.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

from opentelemetry.instrumentation.process.probes.gc_pauses import (
    BOUNDS,
    DEPTH,
    GENERATIONS,
    GcPauseReading,
    GcPauses,
    quantile_bound,
)

from .support.gc import callbacks_kept, cyclic_garbage, gc_off, minus, steady


@pytest.mark.parametrize("histogram", [False, True])
def test_reset_during_a_collection_forgets_that_collection(histogram: bool) -> None:
    seen: list[int] = []
    with callbacks_kept(), gc_off():
        rec = GcPauses(histogram=histogram)
        assert rec.start()

        def resetter(phase: str, info: dict[str, int]) -> None:
            if phase == "start" and not seen:
                seen.append(info["generation"])
                rec.reset()  # ours has seen this start already

        gc.callbacks.append(resetter)
        cyclic_garbage(1000)
        gc.collect()
        gc.callbacks.remove(resetter)
        before, first = steady(rec)
        cyclic_garbage(1000)
        gc.collect()
        after, second = steady(rec)
        rec.stop()
    assert seen == [GENERATIONS - 1]
    assert first.pauses == (0,) * GENERATIONS  # the collection in flight was forgotten
    assert minus(second.pauses, first.pauses) == minus(after, before)
    assert second.pauses == minus(after, before)
    if histogram:
        assert second.buckets is not None
        assert tuple(sum(row) for row in second.buckets) == second.pauses


def test_every_pause_lands_in_a_bucket_of_its_generation() -> None:
    runs = (5, 3, 2)[:GENERATIONS]
    with callbacks_kept(), gc_off():
        rec = GcPauses(histogram=True)
        assert rec.start()
        before, r0 = steady(rec)
        for generation, n in enumerate(runs):
            for _ in range(n):
                cyclic_garbage(500)
                gc.collect(generation)
        after, r1 = steady(rec)
        rec.stop()
    assert r0.buckets is not None and r1.buckets is not None
    counted = tuple(sum(b - a for a, b in zip(r0.buckets[g], r1.buckets[g], strict=True))
                    for g in range(GENERATIONS))  # fmt: skip
    assert counted == minus(after, before) == minus(r1.pauses, r0.pauses)
    assert counted == runs


@pytest.mark.parametrize("histogram", [False, True])
def test_collections_nested_past_the_timed_depth_are_paired_but_not_timed(
    histogram: bool,
) -> None:
    # Nesting is a 3.12 quirk, and never this deep for real: driven by hand,
    # as CPython calls the callback, with a clock that counts 0, 1, 2...
    rec = GcPauses(histogram=histogram)
    callback: Any = rec._callback
    ticks = iter(range(100))

    def clock() -> float:
        return float(next(ticks))

    levels = DEPTH + 2
    for _ in range(levels):
        callback("start", {"generation": 0}, _clock=clock)  # 0, 1, 2, 3 for the timed
    for _ in range(levels):
        callback("stop", {"generation": 0}, _clock=clock)  # 4, 5, 6, 7 for the timed
    got = rec.read()
    # Innermost timed level: 3 to 4; outermost: 0 to 7.
    assert got.pauses[0] == DEPTH
    assert got.seconds[0] == 1.0 + 3.0 + 5.0 + 7.0
    assert got.longest[0] == 7.0
    if histogram:
        assert got.buckets is not None
        # 1 s in the last bound's bucket (upper bounds are inclusive), 3, 5 and 7 s above it.
        assert got.buckets[0][-2:] == (1, 3)
    # Paired again: the next collection stands alone.
    callback("start", {"generation": 1}, _clock=clock)  # 8
    callback("stop", {"generation": 1}, _clock=clock)  # 9
    again = rec.read()
    assert again.pauses[:2] == (DEPTH, 1)
    assert again.longest[:2] == (None, 1.0)


def _reading(buckets: tuple[tuple[int, ...], ...]) -> GcPauseReading:
    n = len(buckets)
    return GcPauseReading(
        seconds=(0.0,) * n,
        pauses=tuple(sum(row) for row in buckets),
        longest=(None,) * n,
        buckets=buckets,
    )


def test_quantile_bound_refuses_q_of_zero() -> None:
    reading = GcPauses(histogram=True).read()
    with pytest.raises(ValueError, match=r"q must be in \(0, 1\], not 0.0"):
        quantile_bound(reading, reading, 0, 0.0)


def test_quantile_bound_refuses_readings_of_different_bucket_layouts() -> None:
    with callbacks_kept(), gc_off():
        rec = GcPauses(histogram=True)
        assert rec.start()
        before = rec.read()
        gc.collect()
        after = rec.read()
        rec.stop()
    assert after.buckets is not None
    assert quantile_bound(before, after, GENERATIONS - 1, 1.0) is not None
    # The same counts under one bound fewer: not comparable, never compared.
    shorter = _reading(tuple(row[:-1] for row in after.buckets))
    assert len(shorter.buckets[0]) == len(BOUNDS)  # type: ignore[index]
    with pytest.raises(ValueError):
        quantile_bound(before, shorter, GENERATIONS - 1, 1.0)
    with pytest.raises(ValueError):
        quantile_bound(shorter, after, GENERATIONS - 1, 1.0)
