"""Series that come and go: nothing piles up here, and the SDK's limit is announced."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from opentelemetry.instrumentation.process import ProcessInstrumentor
from opentelemetry.instrumentation.process.instruments import SERIES_WARNING_THRESHOLD

from .conftest import Sdk, points

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


def test_exited_threads_leave_nothing_behind(sdk: Sdk) -> None:
    inst = sdk.instrument(per_thread=True)
    ids = _with_threads(5, lambda: sdk.collect())
    live = inst._metrics._live
    assert live is not None
    cached = {key[1] for key in live._attribute_sets[THREAD_CPU]}
    assert set(ids) <= cached, "the live threads' attribute sets are cached"
    got = sdk.collect()
    reported = {dict(a)["thread.id"] for a in points(got[THREAD_CPU])}
    assert not reported & set(ids), "exited threads are still reported"
    cached = {key[1] for key in live._attribute_sets[THREAD_CPU]}
    assert not cached & set(ids), "exited threads are still cached"


def test_passing_the_sdk_cardinality_limit_is_announced_once(
    sdk: Sdk, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="opentelemetry.instrumentation.process")
    sdk.instrument(per_thread=True, exclude=["system.*", "cpython.*"])
    # Two series per thread: the limit is passed by the thread after the limit / 2.
    threads_needed = SERIES_WARNING_THRESHOLD // 2 + 1
    done = 0
    while done < threads_needed + 5:
        _with_threads(10, lambda: sdk.collect())
        done += 10
        warned = [
            r.getMessage() for r in caplog.records if "distinct attribute sets" in r.getMessage()
        ]
        if done < threads_needed - 10:
            assert warned == [], f"warned after only {done} threads"
    assert len(warned) == 1, warned
    assert warned[0].startswith(f"process metrics: {THREAD_CPU} has reported more than 2000")
    assert "otel.metric.overflow=true" in warned[0] and "Raise that limit" in warned[0]


def test_the_cardinality_warning_comes_with_the_first_set_past_the_limit(
    sdk: Sdk, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exactly when the sets reported so far (as the SDK received them) pass the limit."""
    from opentelemetry.instrumentation.process import instruments

    limit = 10  # even: two sets per thread, so the count meets the limit itself on its way
    monkeypatch.setattr(instruments, "SERIES_WARNING_THRESHOLD", limit)
    caplog.set_level(logging.WARNING, logger="opentelemetry.instrumentation.process")
    sdk.instrument(per_thread=True, max_thread_series=1000)
    reported: set[frozenset[object]] = set()
    got: dict[str, Any] = {}
    while len(reported) <= limit + 2:
        _with_threads(1, lambda: got.update(sdk.collect()))
        reported |= set(points(got[THREAD_CPU]))
        warned = [r.getMessage() for r in caplog.records if THREAD_CPU in r.getMessage()]
        assert len(warned) == (len(reported) > limit), (len(reported), warned)
    assert warned == [
        f"process metrics: {THREAD_CPU} has reported more than {limit} distinct attribute "
        "sets since instrument() (threads, devices or CPUs that came and went). The "
        "OpenTelemetry SDK keeps every set an observable instrument has reported and, past "
        f"its cardinality limit ({limit} per metric unless a View or the reader sets "
        "another), folds new ones into one otel.metric.overflow=true point. Raise that "
        "limit (each set costs the SDK about 1.4 KB) or exclude the metric. This is logged once."
    ]


def _job(name: str, seconds: float, while_alive: Callable[[], None]) -> None:
    """A thread named ``name`` burns ``seconds`` of CPU; ``while_alive`` runs before it exits."""
    burned, release = threading.Event(), threading.Event()

    def burn() -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            sum(range(2_000))
        burned.set()
        release.wait(10)

    t = threading.Thread(target=burn, name=name)
    t.start()
    burned.wait(10)
    try:
        while_alive()
    finally:
        release.set()
        t.join()
    if t.native_id is not None:
        _wait_gone([t.native_id])


def test_by_name_keeps_the_time_of_exited_threads_in_one_series(sdk: Sdk) -> None:
    sdk.instrument(per_thread=True, thread_series_by="name")
    for n in range(4):  # a new thread, a new id and name each time: one series
        _job(f"job-{n}", 0.1, lambda: sdk.collect())
        got = points(sdk.collect()[THREAD_CPU])  # the job has exited
        mine = {a: v for a, v in got.items() if ("thread.name", "job-N") in a}
        assert {dict(a)["cpu.mode"] for a in mine} == {"user", "system"}, got
        assert all("thread.id" not in dict(a) for a in got), "no per-thread id by name"
        # The series keeps the CPU of every job, exited ones included (to the
        # clock tick of /proc's per-thread times: up to two ticks per job).
        tick = 1 / os.sysconf("SC_CLK_TCK")
        assert sum(mine.values()) >= (0.1 - 2 * tick) * (n + 1), (n, mine)


def test_prometheus_scrapes_add_no_series_by_name(
    instrument: Callable[..., ProcessInstrumentor],
) -> None:
    import re
    import urllib.request

    import prometheus_client
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider

    def scrape_series(by: str, scrapes: int) -> tuple[set[str], list[float]]:
        # The reader registers with prometheus_client's default registry.
        provider = MeterProvider(metric_readers=[PrometheusMetricReader()])
        server, thread = prometheus_client.start_http_server(0, addr="127.0.0.1")
        port = server.server_address[1]
        ProcessInstrumentor().instrument(
            meter_provider=provider, per_thread=True, thread_series_by=by, exclude=["system.*"]
        )
        series: set[str] = set()
        totals: list[float] = []
        try:
            for _ in range(scrapes):
                url = f"http://127.0.0.1:{port}/metrics"
                with urllib.request.urlopen(url, timeout=10) as response:
                    text = response.read().decode()
                lines = re.findall(
                    r"^process_metrics_thread_cpu_time_seconds_total\{(.*)\} (\S+)$",
                    text,
                    re.MULTILINE,
                )
                series |= {labels for labels, _ in lines}
                totals.append(sum(float(v) for _, v in lines))
        finally:
            ProcessInstrumentor().uninstrument()
            server.shutdown()
            thread.join()
            provider.shutdown()
        return series, totals

    by_thread, _ = scrape_series("thread", 12)
    by_name, totals = scrape_series("name", 12)
    # prometheus_client serves each scrape on a new thread: a new series each...
    assert len(by_thread) >= 12, by_thread
    # ...unless the series stand for thread-name patterns.
    assert len(by_name) <= 8, by_name
    assert totals == sorted(totals), "a counter summed over patterns never goes down"
