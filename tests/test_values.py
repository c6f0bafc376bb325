"""Values checked against the operating system, not against psutil."""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor

from .conftest import HOST_MODES, Sdk, collect, points, value
from .support import cgroups
from .support.forked import in_child
from .support.waiting import eventually

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads procfs")
# Tests that fork while a thread of the test process may run (Python 3.12+ warns).
fork_with_threads = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")


def _busy(seconds: float) -> None:
    """Spin in user space for about ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        sum(range(2_000))  # mostly user time: the clock read itself is a syscall


@linux_only
def test_rss_matches_proc_statm(sdk: Sdk) -> None:
    sdk.instrument()
    reported = value(sdk.collect()["process.memory.usage"])
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert abs(reported - rss) / rss < 0.03


def test_busy_thread_moves_user_cpu_time(sdk: Sdk) -> None:
    sdk.instrument()
    before = value(sdk.collect()["process.cpu.time"], **{"cpu.mode": "user"})
    worker = threading.Thread(target=_busy, args=(0.5,))
    worker.start()
    worker.join()
    after = value(sdk.collect()["process.cpu.time"], **{"cpu.mode": "user"})
    assert after - before >= 0.3


def _cpu_and_clock() -> tuple[float, float]:
    """CPU seconds of this process, as the kernel counts them, and the monotonic clock."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, time.monotonic()


def _first_collection(
    provider: MeterProvider, reader: InMemoryMetricReader, busy: float
) -> dict[str, float]:
    """Instrument afresh, burn ``busy`` CPU seconds, collect once.

    Returns the reported utilisation (summed over modes), and the CPU seconds
    per wall second that the OS counted over the metric's window, bracketed:
    the baseline is read somewhere inside ``instrument()`` and the value
    inside ``collect()``, so the true ratio lies between ``lo`` and ``hi``.
    """
    ProcessInstrumentor().uninstrument()
    cpu_a0, t_a0 = _cpu_and_clock()
    ProcessInstrumentor().instrument(meter_provider=provider)
    cpu_a1, t_a1 = _cpu_and_clock()
    _busy(busy)
    cpu_b0, t_b0 = _cpu_and_clock()
    util = points(collect(reader)["process.cpu.utilization"])
    cpu_b1, t_b1 = _cpu_and_clock()
    return {
        "util": sum(util.values()),
        "lo": (cpu_b0 - cpu_a1) / (t_b1 - t_a0),
        "hi": (cpu_b1 - cpu_a0) / (t_b0 - t_a1),
    }


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
@fork_with_threads
def test_first_collection_gives_utilization_of_one_busy_core(sdk: Sdk) -> None:
    # The test process runs the same code first: mutation testing picks the
    # tests to run by the code that the test process itself reaches.
    sdk.instrument()
    sdk.collect()

    def pinned() -> dict[str, float]:
        # One CPU in the affinity mask: one busy core is a utilisation of 1.
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
        return _first_collection(sdk.provider, sdk.reader, busy=0.4)

    got = in_child(pinned)
    # About 1; less only when other processes took the CPU, which the bounds see.
    assert got["lo"] * 0.97 <= got["util"] <= got["hi"] * 1.03, got


@linux_only
@fork_with_threads
def test_first_collection_is_divided_by_the_cgroup_cpu_quota(sdk: Sdk) -> None:
    sdk.instrument()
    sdk.collect()
    # Half a CPU: a busy loop gets at most that, and so uses all of its allowance.
    quota = {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000"}
    with cgroups.child_cgroup("cpu") as group:
        for name, setting in quota.items():
            group.write(name, setting)

        def throttled() -> dict[str, float]:
            group.add(os.getpid())
            return _first_collection(sdk.provider, sdk.reader, busy=0.4)

        got = in_child(throttled)
    assert got["lo"] / 0.5 * 0.97 <= got["util"] <= got["hi"] / 0.5 * 1.03, got
    # The kernel enforces the quota per 100 ms period, not per collection: a
    # window of about 0.8 s may hold up to one period's allowance more than
    # its share. Unthrottled, a busy loop would get about 1.0 here.
    assert got["hi"] <= 0.5 * 1.3, f"the quota did not apply: {got}"


def test_thread_count_follows_threads(sdk: Sdk) -> None:
    sdk.instrument()
    before = value(sdk.collect()["process.thread.count"])
    release = threading.Event()
    threads = [threading.Thread(target=release.wait) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        assert value(sdk.collect()["process.thread.count"]) == before + 3
    finally:
        release.set()
        for t in threads:
            t.join()
    # join() returns before the OS thread is gone; give the kernel a moment.
    assert eventually(lambda: value(sdk.collect()["process.thread.count"]) == before)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file descriptors")
def test_fd_count_follows_open_files(sdk: Sdk) -> None:
    sdk.instrument()
    before = value(sdk.collect()["process.unix.file_descriptor.count"])
    with contextlib.ExitStack() as stack:
        for _ in range(5):
            stack.enter_context(tempfile.TemporaryFile())
        assert value(sdk.collect()["process.unix.file_descriptor.count"]) == before + 5
    assert value(sdk.collect()["process.unix.file_descriptor.count"]) == before


def test_uptime_and_host_memory_are_the_oses(sdk: Sdk) -> None:
    sdk.instrument()
    before = time.clock_gettime(time.CLOCK_BOOTTIME) if sys.platform.startswith("linux") else 0
    wall_before = time.time()
    m = sdk.collect()
    wall_after = time.time()  # read around the collection: a stall after it is no error
    create = psutil.Process().create_time()
    # psutil's create time is only good to a second (boot time is whole seconds).
    uptime = value(m["process.uptime"])
    assert wall_before - create - 1.5 < uptime < wall_after - create + 1.5
    if sys.platform.startswith("linux"):
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        started = ticks / os.sysconf("SC_CLK_TCK")
        # The boot-time clock read before and after the collection, to the start tick.
        after = time.clock_gettime(time.CLOCK_BOOTTIME)
        assert before - 1e-6 <= value(m["process.uptime"]) + started <= after + 1e-6
    assert value(m["process.memory.virtual"]) >= value(m["process.memory.usage"]) > 0
    vm = psutil.virtual_memory()
    assert value(m["system.memory.limit"]) == vm.total
    used = value(m["system.memory.usage"], **{"system.memory.state": "used"})
    assert abs(used - (vm.total - vm.available)) / vm.total < 0.05
    assert value(m["system.cpu.logical.count"]) == psutil.cpu_count()


def _statm_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _host_memory() -> int:
    """MemTotal from /proc/meminfo, in bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise LookupError("no MemTotal in /proc/meminfo")


def _memory_utilization(reader: InMemoryMetricReader) -> dict[str, float]:
    """The reported process.memory.utilization, and the RSS read around the collection."""
    before = _statm_rss()
    got = value(collect(reader)["process.memory.utilization"])
    after = _statm_rss()
    return {"util": got, "rss_lo": min(before, after), "rss_hi": max(before, after)}


def _rss_share(got: dict[str, float], limit: int) -> tuple[float, float]:
    # statm and psutil count the same pages; the slack covers pages that came
    # or went between the reads.
    return got["rss_lo"] / limit * 0.99, got["rss_hi"] / limit * 1.01


@linux_only
def test_memory_utilization_is_rss_over_the_memory_available(sdk: Sdk) -> None:
    sdk.instrument()
    got = _memory_utilization(sdk.reader)
    limit = min(x for x in (_host_memory(), cgroups.memory_limit()) if x)
    lo, hi = _rss_share(got, limit)
    assert lo <= got["util"] <= hi, (got, limit)


@linux_only
@fork_with_threads
def test_memory_utilization_is_divided_by_the_cgroup_memory_limit(sdk: Sdk) -> None:
    sdk.instrument()
    sdk.collect()
    limit = 1 << 30
    if _host_memory() < 4 * limit:
        pytest.skip("the host has too little memory for a limit well below it")
    with cgroups.child_cgroup("memory") as group:
        group.write("memory.limit_in_bytes", str(limit))

        def limited() -> dict[str, Any]:
            group.add(os.getpid())
            # The limit is a static fact: instrument again to read it.
            ProcessInstrumentor().uninstrument()
            ProcessInstrumentor().instrument(meter_provider=sdk.provider)
            return {**_memory_utilization(sdk.reader), "limit": cgroups.memory_limit()}

        got = in_child(limited)
    assert got["limit"] == limit, got
    lo, hi = _rss_share(got, limit)
    assert lo <= got["util"] <= hi, got


def _host_cpu() -> dict[str, float]:
    times = psutil.cpu_times()._asdict()
    return {
        mode: sum(times[f] for f in fields if f in times)
        for mode, fields in HOST_MODES.items()
        if any(f in times for f in fields)
    }


def test_system_cpu_utilization_is_each_modes_share_since_the_last_collection(sdk: Sdk) -> None:
    sdk.instrument()
    a0 = _host_cpu()
    sdk.collect()
    a1 = _host_cpu()
    user0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    _busy(0.5)
    mine = resource.getrusage(resource.RUSAGE_SELF).ru_utime - user0
    b0 = _host_cpu()
    util = points(sdk.collect()["system.cpu.utilization"])
    b1 = _host_cpu()
    shares = {dict(k)["cpu.mode"]: v for k, v in util.items()}
    assert set(shares) == set(a0)
    # The window runs from the first collection (between a0 and a1) to the
    # second (between b0 and b1), so each share lies between these bounds.
    total_lo = sum(b0.values()) - sum(a1.values())
    total_hi = sum(b1.values()) - sum(a0.values())
    for mode, share in shares.items():
        lo = max(0.0, b0[mode] - a1[mode]) / total_hi
        hi = (b1[mode] - a0[mode]) / total_lo
        assert lo - 1e-9 <= share <= hi + 1e-9, (mode, share, lo, hi)
    # This process's busy loop is host user time too (the host counts in
    # ticks), or nice time when the process runs niced.
    mode = "nice" if hasattr(os, "nice") and os.nice(0) > 0 else "user"
    assert shares[mode] >= (mine - 0.03) / total_hi, (mode, shares, mine, total_hi)
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-6)


def test_gc_collections_follow_gc_collect(sdk: Sdk) -> None:
    import gc

    sdk.instrument()
    key = {"cpython.gc.generation": 2}
    gc.disable()  # no automatic collection in between: only the one below counts
    try:
        before = value(sdk.collect()["cpython.gc.collections"], **key)
        gc.collect()
        assert value(sdk.collect()["cpython.gc.collections"], **key) == before + 1
    finally:
        gc.enable()


def test_context_switches_count_all_threads(sdk: Sdk) -> None:
    sdk.instrument()
    key = {"process.context_switch.type": "voluntary"}
    before = value(sdk.collect()["process.context_switches"], **key)

    def sleeper() -> None:
        for _ in range(200):
            time.sleep(0.0005)

    threads = [threading.Thread(target=sleeper) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Each sleep is a voluntary switch of a non-main thread.
    assert value(sdk.collect()["process.context_switches"], **key) - before >= 300


@pytest.mark.skipif(sys.platform == "win32", reason="getrusage(2)")
def test_rusage_group_is_getrusage_by_attribute(sdk: Sdk) -> None:
    sdk.instrument()
    before = resource.getrusage(resource.RUSAGE_SELF)
    got = sdk.collect()
    after = resource.getrusage(resource.RUSAGE_SELF)
    expected = {
        ("process.cpu.time", "cpu.mode", "user"): "ru_utime",
        ("process.cpu.time", "cpu.mode", "system"): "ru_stime",
        ("process.context_switches", "process.context_switch.type", "voluntary"): "ru_nvcsw",
        ("process.context_switches", "process.context_switch.type", "involuntary"): "ru_nivcsw",
        ("process.paging.faults", "system.paging.fault.type", "major"): "ru_majflt",
        ("process.paging.faults", "system.paging.fault.type", "minor"): "ru_minflt",
    }
    for name in {n for n, _, _ in expected}:
        keys = {(name, k, v) for attrs in points(got[name]) for k, v in attrs}
        assert keys == {e for e in expected if e[0] == name}, keys
    for (name, key, attribute), field in expected.items():
        reported = value(got[name], **{key: attribute})
        assert getattr(before, field) <= reported <= getattr(after, field), (name, attribute)


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

        assert eventually(gone)

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


def _thread_cpu() -> dict[int, float]:
    """CPU seconds of each thread of this process, from /proc/self/task/*/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, float] = {}
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(FileNotFoundError):
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            found[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return found


@linux_only
@fork_with_threads
def test_the_busiest_thread_is_the_one_kept(sdk: Sdk) -> None:
    sdk.instrument(per_thread=True, max_thread_series=2)  # one thread: user and system
    sdk.collect()

    def one_busy_among_idle() -> dict[str, Any]:
        # In a forked child every thread starts at 0 CPU seconds, the main one too.
        release = threading.Event()
        busy = threading.Thread(target=lambda: (_busy(0.2), release.wait(10)), name="busy")
        idle = [threading.Thread(target=release.wait, name=f"idle-{i}") for i in range(4)]
        for t in [busy, *idle]:
            t.start()
        try:
            while busy.native_id is None or _thread_cpu().get(busy.native_id, 0) < 0.15:
                time.sleep(0.01)
            kept = points(sdk.collect()["process_metrics.thread.cpu.time"])
            return {
                "kept": sorted([dict(a)["thread.id"], dict(a).get("thread.name")] for a in kept),
                "busy": busy.native_id,
                "cpu": _thread_cpu(),
            }
        finally:
            release.set()
            for t in [busy, *idle]:
                t.join()

    got = in_child(one_busy_among_idle)
    assert max(got["cpu"], key=lambda tid: got["cpu"][tid]) == str(got["busy"]), got
    assert got["kept"] == [[got["busy"], "busy"]] * 2, got
