"""Series that come and go: nothing piles up here, and the SDK's limit is announced."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor
from opentelemetry.instrumentation.process.instruments import SERIES_WARNING_THRESHOLD

from .conftest import collect, points

THREAD_CPU = "process_metrics.thread.cpu.time"


def _with_threads(n: int, body: Callable[[], None]) -> list[int]:
    """Run ``body`` while ``n`` extra threads are alive; return their native ids."""
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait) for _ in range(n)]
    for t in threads:
        t.start()
    try:
        body()
    finally:
        stop.set()
        for t in threads:
            t.join()
    ids = [t.native_id for t in threads if t.native_id is not None]
    _wait_gone(ids)
    return ids


def _wait_gone(ids: list[int], timeout: float = 5.0) -> None:
    """Wait until the OS has reaped ``ids``: join() returns a moment before that."""
    if not os.path.isdir("/proc/self/task"):
        return
    deadline = time.monotonic() + timeout
    while set(map(str, ids)) & set(os.listdir("/proc/self/task")):
        assert time.monotonic() < deadline, "threads still listed by the OS after join()"
        time.sleep(0.005)


def test_exited_threads_leave_nothing_behind(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    inst = instrument(per_thread=True)
    ids = _with_threads(5, lambda: collect(reader))
    live = inst._metrics._live
    assert live is not None
    cached = {key[1] for key in live._attribute_sets[THREAD_CPU]}
    assert set(ids) <= cached, "the live threads' attribute sets are cached"
    got = collect(reader)
    reported = {dict(a)["thread.id"] for a in points(got[THREAD_CPU])}
    assert not reported & set(ids), "exited threads are still reported"
    cached = {key[1] for key in live._attribute_sets[THREAD_CPU]}
    assert not cached & set(ids), "exited threads are still cached"


def test_passing_the_sdk_cardinality_limit_is_announced_once(
    instrument: Callable[..., ProcessInstrumentor],
    reader: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="opentelemetry.instrumentation.process")
    instrument(per_thread=True, exclude=["system.*", "cpython.*"])
    # Two series per thread: the limit is passed by the thread after the limit / 2.
    threads_needed = SERIES_WARNING_THRESHOLD // 2 + 1
    done = 0
    while done < threads_needed + 5:
        _with_threads(10, lambda: collect(reader))
        done += 10
        warned = [
            r.getMessage() for r in caplog.records if "distinct attribute sets" in r.getMessage()
        ]
        if done < threads_needed - 10:
            assert warned == [], f"warned after only {done} threads"
    assert len(warned) == 1, warned
    assert warned[0].startswith(f"process metrics: {THREAD_CPU} has reported more than 2000")
    assert "otel.metric.overflow=true" in warned[0] and "Raise that limit" in warned[0]
