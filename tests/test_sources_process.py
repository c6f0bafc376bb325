"""The process sources: their values against the OS (the kernel's own files and
counters, read by the test), psutil's thread ranking, a failed direct read, Windows
handles on a faked platform, a shared thread listing, hook faults, and the value
excerpts of error messages.
"""

from __future__ import annotations

import collections
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

from opentelemetry.instrumentation.process import ProcessInstrumentor, ProcessMetricsOptions
from opentelemetry.instrumentation.process.excerpt import excerpt
from opentelemetry.instrumentation.process.linux import threads as linux_threads
from opentelemetry.instrumentation.process.snapshot import SnapshotCache
from opentelemetry.instrumentation.process.sources import SOURCES, ReadContext
from opentelemetry.instrumentation.process.sources.base import psutil_has

from .conftest import (
    LogLines,
    OpenRecorder,
    Sdk,
    collect,
    points,
    recorded,
    task_listing,
    value,
)
from .support import cgroups
from .support.forked import fork_beside_threads, in_child
from .support.threadjobs import Job, all_thread_times
from .support.waiting import eventually, while_still

THREAD_CPU = "process_metrics.thread.cpu.time"
ON_LINUX = sys.platform.startswith("linux")
linux_only = pytest.mark.skipif(not ON_LINUX, reason="reads procfs")
# Tests that fork while a thread of the test process may run (Python 3.12+ warns).
fork_with_threads = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")


def _by_thread(reader: InMemoryMetricReader) -> dict[int, dict[str, float]]:
    """One collection's per-thread CPU series: tid -> {cpu.mode: seconds}."""
    out: dict[int, dict[str, float]] = {}
    for attributes, seconds in points(collect(reader)[THREAD_CPU]).items():
        a = dict(attributes)
        out.setdefault(a["thread.id"], {})[a["cpu.mode"]] = seconds
    return out


def _modes(times: tuple[float, float]) -> dict[str, float]:
    return {"user": times[0], "system": times[1]}


def _ranked(times: dict[int, tuple[float, float]]) -> list[int]:
    """Thread ids busiest first (user + system), ties by lower id."""
    return sorted(times, key=lambda tid: (-sum(times[tid]), tid))


# --- psutil's path: every thread read, the busiest kept


@pytest.mark.skipif(not ON_LINUX, reason="sleeping threads are told apart in /proc")
def test_psutils_path_keeps_the_busiest_threads_user_plus_system(sdk: Sdk, jobs: list[Job]) -> None:
    # Idle threads first: lower ids than the burners, so that only CPU time ranks.
    jobs += [Job("idle-1"), Job("idle-2")]
    user = Job("user-burner", user=0.12)
    system = Job("system-burner", system=0.12)
    jobs += [user, system]
    ranked = _ranked(all_thread_times())
    keep = max(ranked.index(user.tid), ranked.index(system.tid)) + 1
    assert keep < len(ranked), ranked
    sdk.instrument(per_thread=True, direct_reads=False, max_thread_series=2 * keep)
    got = _by_thread(sdk.reader)
    truth = all_thread_times()  # only threads that are running move, the callers'
    assert set(got) == set(_ranked(truth)[:keep]), (got, truth)
    for job in (user, system):
        assert got[job.tid] == _modes(truth[job.tid]), (got, truth)


# --- the direct read: given up after its first failure


@pytest.mark.skipif(not ON_LINUX, reason="the direct read is Linux-only")
def test_a_failing_direct_thread_read_is_tried_once_then_psutil_serves(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, logged: LogLines, jobs: list[Job]
) -> None:
    calls: list[int] = []

    def refused(limit: int, *, tids: Any = None) -> Any:  # a fault: a seccomp filter
        calls.append(limit)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(linux_threads, "busiest_threads", refused)
    job = Job("burner", user=0.05, system=0.03)
    jobs.append(job)
    sdk.instrument(per_thread=True, direct_reads=True, max_thread_series=200)
    for _ in range(3):
        got = _by_thread(sdk.reader)
        assert got[job.tid] == _modes(job.times()), got
    assert len(calls) == 1, "the failed direct read is not tried again"
    warnings = [line for line in logged.lines if "direct Linux read" in line]
    assert warnings == [
        "WARNING process metrics: the direct Linux read 'threads' failed (PermissionError: "
        "[Errno 1] Operation not permitted); psutil is used instead from now on."
    ], logged.lines


# --- the thread count: taken from the listing the per-thread read made


@pytest.mark.skipif(not ON_LINUX, reason="counts the opens of /proc files")
@pytest.mark.parametrize(
    ("direct_reads", "by"), [(True, "thread"), (False, "thread"), (True, "name")]
)
def test_the_thread_count_reuses_the_per_thread_listing(
    sdk: Sdk, opens: OpenRecorder, direct_reads: bool, by: str
) -> None:
    sdk.instrument(per_thread=True, direct_reads=direct_reads, thread_series_by=by)
    sdk.collect()
    # Listed on either side, until no thread started or ended meanwhile (an earlier test's
    # released threads may still be on their way out).
    (got, paths), _, listed = while_still(task_listing, lambda: recorded(sdk, opens))
    assert points(got["process.thread.count"]) == {frozenset(): len(listed)}
    # psutil would read the count from status: the listing made it needless.
    assert not [p for p in paths if p.endswith("/status")], paths


# --- Windows handles, on a faked Windows


def _fake_windows(monkeypatch: pytest.MonkeyPatch, *, with_handles: bool) -> None:
    # As tests/test_platforms.py fakes it; psutil gets the call it has on Windows,
    # answered with this process's descriptors (what Windows handles stand for).
    monkeypatch.setattr(psutil, "WINDOWS", True)
    monkeypatch.setattr(psutil, "LINUX", False)
    monkeypatch.setattr(sys, "platform", "win32")
    if with_handles:
        monkeypatch.setattr(
            psutil.Process, "num_handles", lambda self: self.num_fds(), raising=False
        )


@pytest.mark.skipif(not hasattr(psutil.Process, "num_fds"), reason="counts descriptors")
def test_windows_handles_are_psutils_count(monkeypatch: pytest.MonkeyPatch) -> None:
    # Bound first: psutil's constructor itself would take the Windows path.
    cache = SnapshotCache(ProcessMetricsOptions(), ["process_num_handles"])
    _fake_windows(monkeypatch, with_handles=True)
    assert SOURCES["process_num_handles"].supported() is True
    try:
        got = cache.snapshot().readings["process_num_handles"]
        fds = len(os.listdir("/proc/self/fd" if ON_LINUX else "/dev/fd"))
    finally:
        cache.close()
    assert got == {"count": fds}
    assert type(got["count"]) is int


def test_a_psutil_without_the_call_has_no_windows_handles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_windows(monkeypatch, with_handles=False)
    monkeypatch.delattr(psutil.Process, "num_handles", raising=False)
    assert SOURCES["process_num_handles"].supported() is False


def test_availability_is_psutils_own_methods(monkeypatch: pytest.MonkeyPatch) -> None:
    # Checked when asked, not when imported: psutil can be patched in between.
    has_io = psutil_has("Process.io_counters")
    has_handles = psutil_has("Process.num_handles")
    assert has_io() is hasattr(psutil.Process, "io_counters")
    assert has_handles() is (sys.platform == "win32")
    monkeypatch.setattr(psutil.Process, "num_handles", lambda self: 0, raising=False)
    assert has_handles() is True
    monkeypatch.delattr(psutil.Process, "io_counters")
    assert has_io() is False
    # A module-level function: cpu_freq is missing on some platforms and psutil versions.
    has_freq = psutil_has("cpu_freq")
    assert has_freq() is hasattr(psutil, "cpu_freq")
    monkeypatch.delattr(psutil, "cpu_freq", raising=False)
    assert has_freq() is False


# --- hook faults: each one said once, per source, hook and exception type


def _failing_open(
    monkeypatch: pytest.MonkeyPatch, name: str, fail: Callable[[ReadContext], bool]
) -> None:
    monkeypatch.setitem(SOURCES, name, SOURCES[name]._replace(open=fail))  # type: ignore[arg-type]


def test_each_source_whose_hook_fails_is_said(
    monkeypatch: pytest.MonkeyPatch, logged: LogLines
) -> None:
    def broken(_ctx: ReadContext) -> bool:  # a fault injected: the runtime refuses a hook
        raise RuntimeError("no hook")

    names = ["cpython_gc_pauses", "asyncio_loops"]
    for name in names:
        _failing_open(monkeypatch, name, broken)
    cache = SnapshotCache(ProcessMetricsOptions(), names)
    cache.close()
    assert [line for line in logged.lines if "could not" in line] == [
        f"WARNING process metrics: could not open source {name!r} (RuntimeError: no hook); "
        "the metrics it feeds are left out."
        for name in names
    ]


@fork_beside_threads
def test_after_a_fork_an_open_hook_is_not_run_again_and_a_failing_reset_is_said(
    monkeypatch: pytest.MonkeyPatch, logged: LogLines
) -> None:
    parent = os.getpid()
    opened: list[int] = []

    def counted(_ctx: ReadContext) -> bool:
        opened.append(os.getpid())
        return True

    def reset(_ctx: ReadContext, _forked_at: float | None) -> None:
        if os.getpid() != parent:  # a fault injected: only in the child
            raise KeyError("no hook")

    _failing_open(monkeypatch, "cpython_gc_pauses", broken_open)
    monkeypatch.setitem(SOURCES, "process_memory", SOURCES["process_memory"]._replace(open=counted))
    monkeypatch.setitem(SOURCES, "cpython_gc", SOURCES["cpython_gc"]._replace(after_fork=reset))
    names = ["cpython_gc_pauses", "process_memory", "cpython_gc"]
    cache = SnapshotCache(ProcessMetricsOptions(), names)
    try:
        assert len([line for line in logged.lines if "could not" in line]) == 1

        def child() -> dict[str, Any]:
            read = sorted(cache.snapshot().readings)
            return {
                "log": [line for line in logged.lines if "could not" in line],
                "read": read,
                "opened": opened,
            }

        got = in_child(child)
    finally:
        cache.close()
    # What the open hooks found is inherited: they ran once, in the parent.
    assert got["opened"] == [parent], got
    # The source that failed to open stays out; the one whose reset failed joins it.
    assert got["read"] == ["process_memory"], got
    assert got["log"][1:] == [
        "WARNING process metrics: could not reset source 'cpython_gc' "
        "(KeyError: 'no hook'); the metrics it feeds are left out."
    ], got


@fork_beside_threads
def test_a_reset_failing_otherwise_in_a_grandchild_is_said_again(
    monkeypatch: pytest.MonkeyPatch, logged: LogLines
) -> None:
    """A hook fault is keyed by its exception type: another one is said, the same one is not."""
    parent = os.getpid()

    def reset(_ctx: ReadContext, _forked_at: float | None) -> None:
        if os.getppid() == parent:  # a fault injected: one in the child, another in its child
            raise RuntimeError("no hook")
        raise KeyError("no hook")

    monkeypatch.setitem(SOURCES, "cpython_gc", SOURCES["cpython_gc"]._replace(after_fork=reset))
    cache = SnapshotCache(ProcessMetricsOptions(), ["process_memory", "cpython_gc"])

    def log() -> list[str]:
        return [line for line in logged.lines if "could not" in line]

    def great_grandchild() -> dict[str, Any]:
        cache.snapshot()
        return {"log": log()}

    def grandchild() -> dict[str, Any]:
        cache.snapshot()
        return {"log": log(), "child": in_child(great_grandchild)}

    def child() -> dict[str, Any]:
        cache.snapshot()
        return {"log": log(), "child": in_child(grandchild)}

    try:
        got = in_child(child)
    finally:
        cache.close()
    said = (
        "WARNING process metrics: could not reset source 'cpython_gc' ({}); "
        "the metrics it feeds are left out."
    )
    in_the_child = [said.format("RuntimeError: no hook")]
    assert got["log"] == in_the_child, got
    # Each child inherits its parent's fault log: the KeyError is new in the
    # grandchild, and the same KeyError in the next generation is not said again.
    second = got["child"]
    assert second["log"] == [*in_the_child, said.format("KeyError: 'no hook'")], got
    assert second["child"]["log"] == second["log"], got


def broken_open(_ctx: ReadContext) -> bool:  # a fault injected: the runtime refuses a hook
    raise RuntimeError("no hook")


# --- value excerpts in error messages


def test_a_repr_of_exactly_the_limit_is_shown_whole() -> None:
    text = "x" * 8
    assert excerpt(text, 10) == repr(text) == "'xxxxxxxx'"
    longer = "x" * 9
    assert excerpt(longer, 10) == repr(longer)[:5] + "...)" + repr(longer)[-1]


def test_containers_of_exactly_the_limit_keep_their_type_in_the_excerpt() -> None:
    fields = [f"f{i}" for i in range(30)]
    row = collections.namedtuple("row", fields)(*range(30))  # type: ignore[misc]
    counts = collections.Counter({f"k{i}": i + 1 for i in range(30)})
    for long in (row, counts):
        text = repr(long)
        assert len(long) == 30 and len(text) > 30
        assert excerpt(long, 30) == text[:25] + "...)" + text[-1], long


# --- values against the OS: the kernel's own files and counters, read by the test


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


def test_uptime_and_memory_are_the_oses(sdk: Sdk) -> None:
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
