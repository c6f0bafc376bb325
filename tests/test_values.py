"""Values checked against the operating system, not against psutil."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor

from .conftest import collect, points, value

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads procfs")


def _busy(seconds: float) -> None:
    """Spin in user space for about ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        sum(range(2_000))  # mostly user time: the clock read itself is a syscall


@linux_only
def test_rss_matches_proc_statm(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument()
    reported = value(collect(reader)["process.memory.usage"])
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert abs(reported - rss) / rss < 0.03


def test_busy_thread_moves_user_cpu_time(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument()
    before = value(collect(reader)["process.cpu.time"], **{"cpu.mode": "user"})
    worker = threading.Thread(target=_busy, args=(0.5,))
    worker.start()
    worker.join()
    after = value(collect(reader)["process.cpu.time"], **{"cpu.mode": "user"})
    assert after - before >= 0.3


def test_first_collection_gives_utilization_of_one_busy_core(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    inst = instrument()
    cpu0, wall0 = time.process_time(), time.monotonic()
    available = inst._metrics._live.cache.facts.available_cpus  # type: ignore[union-attr]
    _busy(0.6)
    util = points(collect(reader)["process.cpu.utilization"])
    own = (time.process_time() - cpu0) / (time.monotonic() - wall0) / available
    total = sum(util.values())
    # One core busy out of `available`, already at the first collection: what the
    # test measured itself (less than 1/available on a busy machine).
    assert own * 0.8 <= total <= own * 1.2 and total <= 1.15 / available, (total, own)


def test_thread_count_follows_threads(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument()
    before = value(collect(reader)["process.thread.count"])
    release = threading.Event()
    threads = [threading.Thread(target=release.wait) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        assert value(collect(reader)["process.thread.count"]) == before + 3
    finally:
        release.set()
        for t in threads:
            t.join()
    # join() returns before the OS thread is gone; give the kernel a moment.
    assert _eventually(lambda: value(collect(reader)["process.thread.count"]) == before)


def _eventually(check: Callable[[], bool], timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file descriptors")
def test_fd_count_follows_open_files(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument()
    before = value(collect(reader)["process.unix.file_descriptor.count"])
    with contextlib.ExitStack() as stack:
        for _ in range(5):
            stack.enter_context(tempfile.TemporaryFile())
        assert value(collect(reader)["process.unix.file_descriptor.count"]) == before + 5
    assert value(collect(reader)["process.unix.file_descriptor.count"]) == before


def test_uptime_and_memory_are_plausible(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    import psutil

    instrument()
    m = collect(reader)
    create = psutil.Process().create_time()
    # psutil's create time is only good to a second (boot time is whole seconds).
    assert abs(value(m["process.uptime"]) - (time.time() - create)) < 1.5
    if sys.platform.startswith("linux"):
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        started = ticks / os.sysconf("SC_CLK_TCK")
        uptime = time.clock_gettime(time.CLOCK_BOOTTIME) - started
        assert abs(value(m["process.uptime"]) - uptime) < 0.05
    assert value(m["process.memory.virtual"]) >= value(m["process.memory.usage"]) > 0
    assert 0 < value(m["process.memory.utilization"]) < 1
    vm = psutil.virtual_memory()
    assert value(m["system.memory.limit"]) == vm.total
    used = value(m["system.memory.usage"], **{"system.memory.state": "used"})
    assert abs(used - (vm.total - vm.available)) / vm.total < 0.05
    assert value(m["system.cpu.logical.count"]) == psutil.cpu_count()


def test_system_cpu_utilization_sums_to_one(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument()
    _busy(0.3)
    util = points(collect(reader)["system.cpu.utilization"])
    assert sum(util.values()) == pytest.approx(1.0, abs=1e-6)


def test_gc_collections_follow_gc_collect(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    import gc

    instrument()
    key = {"cpython.gc.generation": 2}
    before = value(collect(reader)["cpython.gc.collections"], **key)
    gc.collect()
    assert value(collect(reader)["cpython.gc.collections"], **key) == before + 1


def test_context_switches_count_all_threads(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument()
    key = {"process.context_switch.type": "voluntary"}
    before = value(collect(reader)["process.context_switches"], **key)

    def sleeper() -> None:
        for _ in range(200):
            time.sleep(0.0005)

    threads = [threading.Thread(target=sleeper) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Each sleep is a voluntary switch of a non-main thread.
    assert value(collect(reader)["process.context_switches"], **key) - before >= 300


class TestPerThread:
    def test_named_threads_are_reported_and_vanish_when_they_exit(
        self, instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
    ) -> None:
        instrument(per_thread=True)
        release = threading.Event()

        def work() -> None:
            _busy(0.1)
            release.wait()

        worker = threading.Thread(target=work, name="busy-worker")
        worker.start()
        try:
            time.sleep(0.15)
            series = points(collect(reader)["process_metrics.thread.cpu.time"])
            mine = {a: v for a, v in series.items() if ("thread.name", "busy-worker") in a}
            assert {dict(a)["cpu.mode"] for a in mine} == {"user", "system"}
            assert {dict(a)["thread.id"] for a in mine} == {worker.native_id}
        finally:
            release.set()
            worker.join()

        def gone() -> bool:
            after = collect(reader).get("process_metrics.thread.cpu.time")
            return not after or all(("thread.id", worker.native_id) not in a for a in points(after))

        assert _eventually(gone)

    def test_series_are_capped(
        self, instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
    ) -> None:
        instrument(per_thread=True, max_thread_series=4)
        release = threading.Event()
        threads = [threading.Thread(target=release.wait) for _ in range(6)]
        for t in threads:
            t.start()
        try:
            series = points(collect(reader)["process_metrics.thread.cpu.time"])
            assert len(series) == 4
        finally:
            release.set()
            for t in threads:
                t.join()
