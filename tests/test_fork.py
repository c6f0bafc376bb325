"""After os.fork() the child reports itself, with fresh baselines, and never deadlocks."""

from __future__ import annotations

import logging
import os
import resource
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric

from opentelemetry.instrumentation.process import ProcessInstrumentor
from opentelemetry.instrumentation.process.facts import Facts
from opentelemetry.instrumentation.process.platforms import FREE_THREADED

from .conftest import LogLines, Sdk, collect, log_lines, points, value
from .support import cgroups, forkapps
from .support.exporters import Exporter
from .support.forked import HoldUp, c_fork_beside_threads, held_by_another_thread, in_child
from .support.internals import fork_wait_seconds

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

COLLECTION_PAGES = 1 << 20  # at most what one collection allocates and frees


def _in_child(
    body: Callable[[], dict[str, Any]],
    timeout: float = 20.0,
    fork: Callable[[], int] = os.fork,
) -> dict[str, Any]:
    """Run ``body`` in a child made by ``fork``; return what it returned (as JSON)."""
    return in_child(body, timeout=int(timeout), fork=fork)


def _burn_and_collect(
    sdk: Sdk, forked: float, *, allocate_mib: int = 0, slack: float = 0.0
) -> tuple[dict[str, Metric], float, float, int]:
    """In a child: touch ``allocate_mib`` MiB, burn 0.4 s of CPU, collect.

    Returns the collection, the bounds its CPU utilisation must lie in (the
    lower one counted from ``forked``, ``slack`` s earlier), and the bytes kept.
    """
    started, cpu_start = time.monotonic(), _cpu_seconds()
    block = b"x" * (allocate_mib << 20)  # touched, so resident
    end = time.thread_time() + 0.4
    while time.thread_time() < end:
        sum(range(2_000))
    t_b0, cpu_b0 = time.monotonic(), _cpu_seconds()
    got = sdk.collect()
    t_b1, cpu_b1 = time.monotonic(), _cpu_seconds()
    available = cgroups.available_cpus()
    lo = (cpu_b0 - cpu_start) / (t_b1 - forked + slack) / available
    hi = cpu_b1 / (t_b0 - started) / available
    return got, lo, hi, len(block)


@pytest.mark.skipif(sys.platform != "linux", reason="times the child with CLOCK_BOOTTIME (Linux)")
def test_child_reports_its_own_memory_pid_and_cpu(sdk: Sdk) -> None:
    inst = sdk.instrument()
    parent = sdk.collect()
    parent_rss = value(parent["process.memory.usage"])
    parent_start = time.clock_gettime(time.CLOCK_BOOTTIME) - value(parent["process.uptime"])
    time.sleep(0.2)
    forked = time.monotonic()

    def child() -> dict[str, Any]:
        # The baseline is read at fork: between `forked` and the start of the
        # burn, at a CPU time of the child (counted from the fork) below its own.
        got, lo, hi, kept = _burn_and_collect(sdk, forked, allocate_mib=150)
        live = inst._metrics._live
        assert live is not None
        return {
            "rss": value(got["process.memory.usage"]),
            "start": time.clock_gettime(time.CLOCK_BOOTTIME) - value(got["process.uptime"]),
            "cpu": sum(points(got["process.cpu.utilization"]).values()),
            "lo": lo,
            "hi": hi,
            "facts_pid": live.cache.facts.pid,
            "pid": os.getpid(),
            "kept": kept,
        }

    got = _in_child(child)
    assert got["facts_pid"] == got["pid"] != os.getpid()
    assert got["rss"] >= parent_rss + (120 << 20)
    # The child started after the parent (uptime is precise to a clock tick).
    assert got["start"] >= parent_start + 0.19
    # A fresh baseline at fork: the first child collection sees its own busy
    # loop, over the window since the fork.
    assert got["lo"] * 0.97 <= got["cpu"] <= got["hi"] * 1.03, got


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_fork_without_python_hooks_reports_the_child_not_the_parent(sdk: Sdk) -> None:
    inst = sdk.instrument()
    seen = sdk.collect()
    parent_rss = value(seen["process.memory.usage"])
    live = inst._metrics._live
    assert live is not None
    # A collection in flight at the fork: the parent has refreshed a snapshot
    # that no callback has read yet. The child's callbacks must not use it.
    last = live.cache.snapshot()
    in_flight = live.cache.snapshot(last.generation)
    assert in_flight.generation != last.generation and in_flight.pid == os.getpid()

    def child() -> dict[str, Any]:
        got = forkapps.measure(sdk.reader, allocate_mib=40, busy=0.1)
        with open("/proc/self/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        got["own_start"] = ticks / os.sysconf("SC_CLK_TCK")
        names = sdk.collect()
        got["fds"] = value(names["process.unix.file_descriptor.count"])
        got["own_fds"] = len(os.listdir("/proc/self/fd"))  # its own fd counted, as psutil does
        return got

    got = _in_child(child, fork=forkapps.c_fork)
    assert got["facts_pid"] == got["pid"] != os.getpid()
    # Resident memory is not monotonic: the collection's own short-lived pages, freed
    # before the read after it, can lift its reading above that read.
    assert got["floor"] <= got["rss"] <= got["rss_after"] + COLLECTION_PAGES, got
    assert got["rss"] != parent_rss
    # Its own CPU time (getrusage starts at 0 in a child), not the parent's.
    assert got["cpu_before"] <= got["cpu"] <= got["cpu_after"] < 5, got
    assert got["threads"] == got["tasks"] == 1, got
    # Its own start, to a clock tick, not the parent's.
    assert got["before"] - 1e-6 <= got["uptime"] + got["own_start"] <= got["now"] + 1e-6, got
    assert got["fds"] == got["own_fds"], got


def _cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# Forking with a live thread is the point of this test (Python 3.12+ warns).
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_lock_held_at_fork_does_not_deadlock_the_child(sdk: Sdk) -> None:
    inst = sdk.instrument()
    live = inst._metrics._live
    assert live is not None
    with held_by_another_thread(live.cache._lock.get()):
        got = _in_child(lambda: {"names": sorted(sdk.collect())}, timeout=10)
    assert "process.memory.usage" in got["names"]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_parent_is_unaffected_by_the_child(sdk: Sdk) -> None:
    inst = sdk.instrument()
    sdk.collect()
    _in_child(lambda: {"n": len(sdk.collect())})
    live = inst._metrics._live
    assert live is not None
    assert live.cache.facts.pid == os.getpid()
    before = _statm_rss()
    rss = value(sdk.collect()["process.memory.usage"])
    after = _statm_rss()
    assert _near_statm(rss, before, after), (before, rss, after)


# -- the one re-bind: at the child's first snapshot, under the child's own lock ---------


def test_a_child_that_does_not_collect_re_binds_nothing(sdk: Sdk) -> None:
    inst = sdk.instrument()
    sdk.collect()
    live = inst._metrics._live
    assert live is not None
    cache = live.cache
    parent = os.getpid()
    handle = cache._ctx.process

    def child() -> dict[str, Any]:
        before = {"pid": cache.facts.pid, "handle": cache._ctx.process is handle}
        sdk.collect()
        return {"before": before, "after": cache.facts.pid, "pid": os.getpid()}

    got = _in_child(child)
    # Nothing ran at the fork but noting its time: the cache is the parent's
    # until the child's first collection, which re-binds it.
    assert got["before"] == {"pid": parent, "handle": True}, got
    assert got["after"] == got["pid"] != parent, got
    assert cache.facts.pid == parent and cache._ctx.process is handle


@pytest.mark.parametrize("fork", ["os.fork", "C fork"])
def test_a_child_reads_again_only_the_facts_a_fork_changes(fork: str, sdk: Sdk) -> None:
    if fork == "C fork" and sys.platform != "linux":
        pytest.skip("forks from C through glibc")
    inst = sdk.instrument()
    sdk.collect()
    live = inst._metrics._live
    assert live is not None
    parent = live.cache.facts

    def as_json(facts: Facts) -> dict[str, Any]:
        # The cgroup folders (paths in named tuples) as JSON carries them.
        return {k: repr(v) if k == "cgroup_paths" else v for k, v in facts._asdict().items()}

    def child() -> dict[str, Any]:
        sdk.collect()
        own = psutil.Process()
        return {"facts": as_json(live.cache.facts), "created": own.create_time()}

    got = _in_child(child, fork=os.fork if fork == "os.fork" else forkapps.c_fork)
    facts = got["facts"]
    changed = {"pid", "create_time", "start_boottime"}
    # The host's and the inherited facts (affinity, cgroup folders and limits, rlimits) stay.
    assert {k: v for k, v in facts.items() if k not in changed} == {
        k: v for k, v in as_json(parent).items() if k not in changed
    }
    assert facts["pid"] != parent.pid
    assert facts["create_time"] == got["created"] >= parent.create_time
    if parent.start_boottime is not None:
        assert facts["start_boottime"] > parent.start_boottime


@c_fork_beside_threads
def test_threads_of_an_unhooked_child_racing_to_its_first_snapshot_share_one_re_bind(
    sdk: Sdk,
) -> None:
    inst = sdk.instrument()
    sdk.collect()
    live = inst._metrics._live
    assert live is not None
    cache = live.cache

    def child() -> dict[str, Any]:
        sys.setswitchinterval(1e-6)  # threads switch as often as they can
        rebinds: list[int] = []
        rebind = cache._rebind

        def counted(pid: int) -> bool:
            rebinds.append(pid)
            time.sleep(0.01)  # a slow re-bind: the other threads arrive meanwhile
            return rebind(pid)

        cache._rebind = counted  # type: ignore[method-assign]
        start = threading.Barrier(8)
        seen: list[tuple[int, int]] = []

        def first() -> None:
            start.wait(5)
            snap = cache.snapshot()
            seen.append((snap.generation, snap.pid))

        workers = [threading.Thread(target=first) for _ in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(5)
        return {
            "rebinds": rebinds,
            "seen": sorted(set(seen)),
            "n": len(seen),
            "locks": list(cache._lock._locks),
            "pid": os.getpid(),
        }

    # A refresh in flight in the parent: its lock is held at the fork.
    with held_by_another_thread(cache._lock.get()):
        got = _in_child(child, timeout=10, fork=forkapps.c_fork)
    # The parent's lock, held by a thread the child does not have, is not the
    # child's: every thread got through, one re-bound, all share its refresh.
    assert got["n"] == 8, got
    assert got["rebinds"] == [got["pid"]], got
    assert len(got["seen"]) == 1 and got["seen"][0][1] == got["pid"], got
    assert got["locks"] == [got["pid"]], got


@pytest.mark.skipif(sys.platform != "linux", reason="times the child with CLOCK_BOOTTIME (Linux)")
def test_an_unhooked_childs_first_utilisation_is_its_own_since_it_started(sdk: Sdk) -> None:
    sdk.instrument()
    sdk.collect()
    time.sleep(0.2)
    forked = time.monotonic()

    def child() -> dict[str, Any]:
        # No at-fork hook noted the fork: its baseline is the start tick, up
        # to one clock tick before the fork.
        got, lo, hi, _ = _burn_and_collect(sdk, forked, slack=0.011)
        return {"cpu": sum(points(got["process.cpu.utilization"]).values()), "lo": lo, "hi": hi}

    got = _in_child(child, fork=forkapps.c_fork)
    assert got["lo"] * 0.97 <= got["cpu"] <= got["hi"] * 1.03, got


# -- the SDK fork guard, on whichever SDK is installed ------------------------------------


# The three SDK faults, on the SDK alone and guarded: tests/test_sdk_fork_guard.py.


def test_fork_guard_is_a_no_op_with_one_debug_line_where_the_sdk_differs(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from opentelemetry.instrumentation.process import sdk_fork_guard as forks

    sdk.instrument()
    # An SDK that keeps its collection lock elsewhere: the guard must not guess.
    monkeypatch.delattr(sdk.provider, "_measurement_consumer")
    monkeypatch.setattr(forks, "_said_unsupported", False)
    caplog.set_level(logging.DEBUG, logger=forks.__name__)
    assert forks.consumer_lock(sdk.provider) is None
    for _ in range(2):
        got = _in_child(lambda: {"pid": os.getpid(), "names": sorted(sdk.collect())})
        assert got["pid"] != os.getpid() and "process.memory.usage" in got["names"]
    said = [r for r in caplog.records if r.name == forks.__name__]
    assert [r.levelno for r in said] == [logging.DEBUG], [r.getMessage() for r in said]
    assert said[0].getMessage() == (
        "process metrics: MeterProvider has no measurement consumer lock where SDK 1.28-1.45 "
        "keep it; the fork guard does nothing for it."
    )


# -- a collection in flight at fork time ------------------------------------------------


def _statm_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _near_statm(rss: int, before: int, after: int) -> bool:
    """Whether ``rss`` is within 8 MiB of statm's reads on either side of its collection.

    Both reads, not only the one after: the heap can shrink by tens of MiB in between
    (a free-threaded build's allocator returning pages), or grow.
    """
    low, high = sorted((before, after))
    return low - (8 << 20) < rss < high + (8 << 20)


def _fork_during_a_collection(
    where: str,
    hold: float,
    sdk: Sdk,
    monkeypatch: pytest.MonkeyPatch,
    *,
    ended: bool | None = None,
) -> dict[str, Any]:
    """Instrument, then fork while another thread's collection is held up ``hold`` s in ``where``.

    Returns what the child saw: whether that collection had ended when it was
    forked, and its own collection. With ``ended`` given, up to 3 tries for a
    child that saw that: on a loaded machine the thread that must act within
    the hold (the held collection's, or the fork's) can be stalled past it.
    """
    sdk.instrument()
    provider, reader = sdk.provider, sdk.reader
    held = HoldUp(where, provider, monkeypatch)

    def child() -> dict[str, Any]:
        ended_at_fork = held.ended()
        before = _statm_rss()
        got = collect(reader)
        return {
            "ended_at_fork": ended_at_fork,
            "rss": value(got["process.memory.usage"]),
            "statm": (before, _statm_rss()),
        }

    got: dict[str, Any] = {}
    for _ in range(1 if ended is None else 3):
        held.arm(hold)
        # MetricReader.collect(), as a periodic reader's export thread calls it.
        # (Not get_metrics_data(): that also holds the in-memory reader's own
        # lock, which no fork guard knows about.)
        collector = threading.Thread(target=reader.collect)
        collector.start()
        try:
            assert held.entered.wait(10), "the collection never started"
            got = _in_child(child, timeout=10)
        finally:
            held.release()
            collector.join(10)
        if got["ended_at_fork"] == ended:
            break
    return got


IN_FLIGHT = pytest.mark.parametrize("where", ["refresh", "callback"])


@IN_FLIGHT
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_fork_waits_for_a_short_collection_in_flight(
    where: str, sdk: Sdk, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _fork_during_a_collection(where, fork_wait_seconds() / 5, sdk, monkeypatch, ended=True)
    # Shorter than the documented wait: the fork waited it out.
    assert got["ended_at_fork"], got
    assert _near_statm(got["rss"], *got["statm"]), got


@IN_FLIGHT
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_fork_does_not_wait_for_a_long_collection_in_flight(
    where: str, sdk: Sdk, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _fork_during_a_collection(where, fork_wait_seconds() + 3, sdk, monkeypatch)
    # Longer than the documented wait: the fork went ahead in the middle of
    # it, and the child still collects.
    assert not got["ended_at_fork"], got
    assert got["rss"] > 0, got


@pytest.mark.xfail(
    strict=True,
    reason="known bug: a child forked in the middle of a collection that outlasts the fork "
    "wait inherits the SDK's half-collected sums, and its first collection adds its own "
    "values to its parent's (process.memory.usage = parent's RSS + child's)",
)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_child_forked_after_our_callbacks_of_a_long_collection_reports_itself(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _fork_during_a_collection("callback", fork_wait_seconds() + 3, sdk, monkeypatch)
    assert not got["ended_at_fork"], got
    assert _near_statm(got["rss"], *got["statm"]), got


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_after_uninstrument_a_fork_does_not_wait_for_a_collection(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch
) -> None:
    # prefork.md: "After uninstrument() the provider is no longer guarded."
    sdk.instrument()
    ProcessInstrumentor().uninstrument()
    hold = fork_wait_seconds() / 5
    held = HoldUp("callback", sdk.provider, monkeypatch)
    # A fork that waited would always see the collection ended; one that did not sees it
    # ended only if this thread was stalled past the hold before forking: up to 3 tries.
    got: dict[str, Any] = {}
    for _ in range(3):
        held.arm(hold)
        collector = threading.Thread(target=sdk.reader.collect)
        collector.start()
        try:
            assert held.entered.wait(10), "the collection never started"
            got = _in_child(lambda: {"ended_at_fork": held.ended()}, timeout=10)
        finally:
            held.release()
            collector.join(10)
        if not got["ended_at_fork"]:
            break
    assert not got["ended_at_fork"], got


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_child_forked_during_an_export_exports() -> None:
    # prefork.md: an export in flight is not waited for; the child gets a
    # fresh export lock, so its own export thread exports.
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    parent = os.getpid()
    stalled, resume = threading.Event(), threading.Event()

    def stall() -> None:
        """The parent's exports wait for ``resume``: an export in flight over a slow network."""
        if os.getpid() == parent:
            stalled.set()
            resume.wait(10)

    stalling = Exporter(stall)
    exported = stalling.exports
    provider = MeterProvider(
        metric_readers=[PeriodicExportingMetricReader(stalling, export_interval_millis=20)]
    )
    ProcessInstrumentor().instrument(meter_provider=provider)

    def child() -> dict[str, Any]:
        deadline = time.monotonic() + 5
        while os.getpid() not in exported and time.monotonic() < deadline:
            time.sleep(0.01)
        return {"exported": os.getpid() in exported}

    try:
        assert stalled.wait(10), "the export thread never exported"
        got = _in_child(child, timeout=10)
    finally:
        resume.set()
        ProcessInstrumentor().uninstrument()
        provider.shutdown()
    assert got["exported"], "the child's export thread never exported"


def test_a_forked_childs_main_thread_keeps_its_name(sdk: Sdk) -> None:
    # CPython leaves the parent's native_id on the child's main thread object.
    sdk.instrument(per_thread=True)
    sdk.collect()

    def child() -> dict[str, Any]:
        series = points(sdk.collect()["process_metrics.thread.cpu.time"])
        mine = [dict(a) for a in series if ("thread.id", os.getpid()) in a]
        return {"named": [a.get("thread.name") for a in mine], "main": threading.main_thread().name}

    got = in_child(child)
    assert got["named"] == [got["main"]] * 2, got


# -- forks that skip Python's at-fork hooks: the repair at the first collection ------------

UNHOOKED_WARNING = (
    "process metrics: process {pid} was forked without Python's at-fork hooks (uWSGI does "
    "this unless --py-call-osafterfork or --py-call-uwsgi-fork-hooks is given). Its "
    "process metrics are its own, but the SDK's periodic export thread does not run "
    "here and the resource still describes the parent: set up OpenTelemetry in each "
    "worker after the fork (see the pre-fork page of the documentation)."
)


@pytest.fixture
def logged() -> Iterator[LogLines]:
    with log_lines(tracebacks=True) as handler:
        yield handler


def _bounded(call: Callable[[], object], seconds: float) -> bool:
    """Run ``call`` in a thread of this (child) process; whether it returned in time."""
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(seconds)
    return not worker.is_alive()


@pytest.mark.skipif(sys.platform != "linux", reason="forks from C through glibc")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_c_fork_with_the_export_lock_held_is_repaired_at_the_first_collection(
    logged: LogLines,
) -> None:
    import math

    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    from opentelemetry.instrumentation.process import ProcessMetrics

    exporter = Exporter()
    # No export thread: exports happen at force_flush() only, in this thread.
    periodic = PeriodicExportingMetricReader(exporter, export_interval_millis=math.inf)
    provider = MeterProvider(metric_readers=[periodic])
    metrics = ProcessMetrics(meter_provider=provider)
    held_lock = periodic._export_lock

    def child() -> dict[str, Any]:
        logged.lines.clear()
        flushed = _bounded(lambda: provider.force_flush(5_000), 5)
        return {
            "pid": os.getpid(),
            "flushed": flushed,
            "exports": exporter.exports.count(os.getpid()),
            "fresh": periodic._export_lock is not held_lock,
            "log": list(logged.lines),
        }

    try:
        # An export in flight in the parent, over a slow network.
        with held_by_another_thread(held_lock):
            got = _in_child(child, fork=forkapps.c_fork)
            assert held_lock.locked()  # the parent's export is still in flight
    finally:
        metrics.close()
        provider.shutdown()
    # The held lock was replaced before the export: the flush exported once.
    assert got["flushed"] and got["exports"] == 1 and got["fresh"], got
    ours = [line for line in got["log"] if FREE_THREADED_HAZARD not in line]
    assert ours == ["WARNING " + UNHOOKED_WARNING.format(pid=got["pid"])], got


def test_a_child_of_os_fork_is_known_to_have_run_the_hooks(sdk: Sdk, logged: LogLines) -> None:
    # The cache's at-fork hook is how a child knows: without it, every child would
    # be taken for one forked from C, and told so.
    sdk.instrument()
    sdk.collect()

    def child() -> dict[str, Any]:
        logged.lines.clear()
        sdk.collect()
        return {"pid": os.getpid(), "log": list(logged.lines)}

    got = _in_child(child)
    assert got["pid"] != os.getpid() and got["log"] == [], got


def _break_the_unhooked_clean_up(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, error: Callable[[], type[Exception]]
) -> None:
    """Instrument and collect; then the clean-up after a fork raises ``error()``."""
    from opentelemetry.instrumentation.process import sdk_fork_guard as forks

    sdk.instrument()
    sdk.collect()

    def broken(_provider: Any, _hooked: bool) -> None:  # a fault injected: the SDK moved
        raise error()("no such lock")

    monkeypatch.setattr(forks, "after_fork", broken)


@pytest.mark.skipif(sys.platform != "linux", reason="forks from C through glibc")
def test_c_fork_whose_clean_up_fails_still_reports_the_child_and_says_why(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, logged: LogLines
) -> None:
    _break_the_unhooked_clean_up(sdk, monkeypatch, lambda: RuntimeError)

    def child() -> dict[str, Any]:
        logged.lines.clear()
        before = _statm_rss()
        got = sdk.collect()
        statm = (before, _statm_rss())
        again = sdk.collect()
        return {
            "pid": os.getpid(),
            "rss": value(got["process.memory.usage"]),
            "again": sorted(again) == sorted(got),
            "statm": statm,
            "log": list(logged.lines),
        }

    got = _in_child(child, fork=forkapps.c_fork)
    assert got["pid"] != os.getpid() and got["again"], got
    assert _near_statm(got["rss"], *got["statm"]), got
    assert [line for line in got["log"] if FREE_THREADED_HAZARD not in line] == [
        "WARNING process metrics: the clean-up after a fork failed "
        "(RuntimeError: no such lock). [traceback]"
    ], got


FREE_THREADED_HAZARD = "forked without Python's at-fork hooks (uWSGI's default) on a free-threaded"
FREE_THREADED_WARNING = (
    "process metrics: this process was forked without Python's at-fork hooks (uWSGI's "
    "default) on a free-threaded Python. Such a child hangs at its first garbage collection "
    "when another thread ran at the fork (an SDK's export thread, say). Fork with os.fork(), "
    "or have uWSGI run the hooks (--py-call-osafterfork or --py-call-uwsgi-fork-hooks)."
)


@pytest.mark.skipif(sys.platform != "linux", reason="forks from C through glibc")
def test_clean_ups_failing_otherwise_in_two_unhooked_forks_are_each_said(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, logged: LogLines
) -> None:
    parent = os.getpid()
    _break_the_unhooked_clean_up(
        sdk, monkeypatch, lambda: RuntimeError if os.getppid() == parent else LookupError
    )

    def grandchild() -> dict[str, Any]:
        sdk.collect()
        return {"log": [line for line in logged.lines if "clean-up" in line]}

    def child() -> dict[str, Any]:
        sdk.collect()
        return in_child(grandchild, fork=forkapps.c_fork)

    got = in_child(child, fork=forkapps.c_fork)
    assert got["log"] == [
        "WARNING process metrics: the clean-up after a fork failed "
        f"({error}: no such lock). [traceback]"  # this module's log keeps tracebacks
        for error in ("RuntimeError", "LookupError")
    ], got


@pytest.mark.skipif(sys.platform != "linux", reason="forks from C through glibc")
@pytest.mark.parametrize("free_threaded", sorted({FREE_THREADED, True}))
def test_a_fork_without_hooks_on_a_free_threaded_build_says_how_to_avoid_its_hang(
    sdk: Sdk, logged: LogLines, monkeypatch: pytest.MonkeyPatch, free_threaded: bool
) -> None:
    """docs/pythons.md: such a child can hang at its first garbage collection; the package
    says so once, at the child's first collection, on free-threaded builds only."""
    from opentelemetry.instrumentation.process import snapshot

    # On a build with a GIL, its flag stands for a free-threaded build: the words are checked
    # on every build, the hang is not (none can happen here).
    monkeypatch.setattr(snapshot, "FREE_THREADED", free_threaded)
    sdk.instrument()
    sdk.collect()

    def child() -> dict[str, Any]:
        logged.lines.clear()
        sdk.collect()
        sdk.collect()
        return {"pid": os.getpid(), "log": list(logged.lines)}

    got = _in_child(child, fork=forkapps.c_fork)  # no other thread runs here: no hang
    assert got["pid"] != os.getpid(), got
    said = [line for line in got["log"] if FREE_THREADED_HAZARD in line]
    assert len(said) == (1 if free_threaded else 0), got
    if said:
        assert said[0] == "WARNING " + FREE_THREADED_WARNING, said


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_fork_keeps_the_sdk_locks_that_were_free_and_never_breaks_on_other_providers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import math

    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    from opentelemetry.instrumentation.process import ProcessMetrics

    unraisable: list[str] = []

    def hook(u: Any) -> None:
        # Only ours: SDK 1.28's own at-fork hooks call dead weak methods of the
        # readers of earlier tests, each an unraisable TypeError in the child.
        frames = traceback.extract_tb(u.exc_traceback) if u.exc_traceback else []
        if any("instrumentation/process" in f.filename for f in frames):
            unraisable.append(repr(u.exc_value))

    # Before the recorders start: ours chains to it, and gives it back at close().
    monkeypatch.setattr(sys, "unraisablehook", hook)
    periodic = PeriodicExportingMetricReader(Exporter(), export_interval_millis=math.inf)
    provider = MeterProvider(metric_readers=[periodic])
    # A provider that is not the SDK's is guarded too: the hooks must not trip on it.
    others = [ProcessMetrics(meter_provider=NoOpMeterProvider())]
    metrics = ProcessMetrics(meter_provider=provider)
    export_lock = periodic._export_lock
    consumer_lock = provider._measurement_consumer._lock

    def child() -> dict[str, Any]:
        return {
            "export_kept": periodic._export_lock is export_lock,
            "consumer_kept": provider._measurement_consumer._lock is consumer_lock,
            "free": not export_lock.locked() and not consumer_lock.locked(),
            "unraisable": unraisable,
        }

    try:
        got = _in_child(child)
    finally:
        metrics.close()
        for other in others:
            other.close()
        provider.shutdown()
    assert got == {"export_kept": True, "consumer_kept": True, "free": True, "unraisable": []}
    assert unraisable == []


def test_the_guard_finds_the_readers_of_a_proxied_provider_in_either_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.metrics._internal import _ProxyMeterProvider

    from opentelemetry.instrumentation.process import sdk_fork_guard as forks

    reader = InMemoryMetricReader()
    sdk = MeterProvider(metric_readers=[reader])
    # The API's global provider before set_meter_provider(): a proxy to the real one.
    proxy = _ProxyMeterProvider()
    monkeypatch.setattr(proxy, "_real_meter_provider", sdk, raising=False)
    consumer = sdk._measurement_consumer
    assert forks.consumer_lock(proxy) == (consumer, consumer._lock)
    assert forks.readers(proxy) == [reader]
    # Older SDKs (1.28) also list them in the provider's configuration, and a
    # reader there may not be in the storages: that shape is faked here.
    other = InMemoryMetricReader()
    older = types.SimpleNamespace(metric_readers=(reader, other))
    monkeypatch.setattr(sdk, "_sdk_config", older)
    assert forks.readers(proxy) == [reader, other]
    monkeypatch.delattr(consumer, "_reader_storages")
    assert forks.readers(proxy) == [reader, other]
    # Neither place: no reader, and no error.
    monkeypatch.setattr(sdk, "_sdk_config", None)
    assert forks.readers(sdk) == []
    assert forks.readers(NoOpMeterProvider()) == []
    assert forks.consumer_lock(NoOpMeterProvider()) is None
    monkeypatch.undo()  # older SDKs shut down through _sdk_config
    sdk.shutdown()
