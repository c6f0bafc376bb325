"""After os.fork() the child reports itself, with fresh baselines, and never deadlocks."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor

from . import forkapps
from .conftest import collect, points, value

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _in_child(
    body: Callable[[], dict[str, Any]],
    timeout: float = 20.0,
    fork: Callable[[], int] = os.fork,
) -> dict[str, Any]:
    """Run ``body`` in a child made by ``fork``; return what it returned (as JSON)."""
    read_end, write_end = os.pipe()
    pid = fork()
    if pid == 0:  # child
        os.close(read_end)
        signal.alarm(int(timeout))  # a deadlock ends the child instead of hanging the suite
        try:
            result = body()
        except BaseException as exc:  # noqa: BLE001 - report anything to the parent
            result = {"error": repr(exc)}
        os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as f:
        chunks.append(f.read())
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"child died: status {status}"
    result: dict[str, Any] = json.loads(b"".join(chunks) or b"{}")
    assert "error" not in result, result
    return result


@pytest.mark.skipif(sys.platform != "linux", reason="times the child with CLOCK_BOOTTIME (Linux)")
def test_child_reports_its_own_memory_pid_and_cpu(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    inst = instrument()
    parent = collect(reader)
    parent_rss = value(parent["process.memory.usage"])
    parent_start = time.clock_gettime(time.CLOCK_BOOTTIME) - value(parent["process.uptime"])
    time.sleep(0.2)

    def child() -> dict[str, Any]:
        cpu0, wall0 = time.process_time(), time.monotonic()
        block = b"x" * (150 << 20)  # touched, so resident
        end = time.thread_time() + 0.4
        while time.thread_time() < end:
            sum(range(2_000))
        got = collect(reader)
        cpu1, wall1 = time.process_time(), time.monotonic()
        live = inst._metrics._live
        assert live is not None
        return {
            "rss": value(got["process.memory.usage"]),
            "start": time.clock_gettime(time.CLOCK_BOOTTIME) - value(got["process.uptime"]),
            "cpu": sum(points(got["process.cpu.utilization"]).values()),
            "own_cpu": (cpu1 - cpu0) / (wall1 - wall0),
            "facts_pid": live.cache.facts.pid,
            "pid": os.getpid(),
            "available": live.cache.facts.available_cpus,
            "kept": len(block),
        }

    got = _in_child(child)
    assert got["facts_pid"] == got["pid"] != os.getpid()
    assert got["rss"] >= parent_rss + (120 << 20)
    # The child started after the parent (uptime is precise to a clock tick).
    assert got["start"] >= parent_start + 0.19
    # A fresh baseline at fork: the first child collection sees its own busy loop,
    # as the child measured it itself (however busy the machine is).
    assert got["cpu"] == pytest.approx(got["own_cpu"] / got["available"], rel=0.2)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_fork_without_python_hooks_reports_the_child_not_the_parent(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    inst = instrument()
    seen = collect(reader)
    parent_rss = value(seen["process.memory.usage"])
    live = inst._metrics._live
    assert live is not None
    # A collection in flight at the fork: the parent has refreshed a snapshot
    # that no callback has read yet. The child's callbacks must not use it.
    last = live.cache.snapshot()
    in_flight = live.cache.snapshot(last.generation)
    assert in_flight.generation != last.generation and in_flight.pid == os.getpid()

    def child() -> dict[str, Any]:
        got = forkapps.measure(reader, allocate_mib=40, busy=0.1)
        with open("/proc/self/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        got["own_start"] = ticks / os.sysconf("SC_CLK_TCK")
        names = collect(reader)
        got["fds"] = value(names["process.unix.file_descriptor.count"])
        got["own_fds"] = len(os.listdir("/proc/self/fd"))  # its own fd counted, as psutil does
        return got

    got = _in_child(child, fork=forkapps.c_fork)
    assert got["facts_pid"] == got["pid"] != os.getpid()
    assert got["floor"] <= got["rss"] <= got["rss_after"], got
    assert got["rss"] != parent_rss
    # Its own CPU time (getrusage starts at 0 in a child), not the parent's.
    assert got["cpu_before"] <= got["cpu"] <= got["cpu_after"] < 5, got
    assert got["threads"] == got["tasks"] == 1, got
    # Its own start, to a clock tick, not the parent's.
    assert abs(got["uptime"] - (got["now"] - got["own_start"])) <= 0.05, got
    assert got["fds"] == got["own_fds"], got


# Forking with a live thread is the point of this test (Python 3.12+ warns).
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_lock_held_at_fork_does_not_deadlock_the_child(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    inst = instrument()
    live = inst._metrics._live
    assert live is not None
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with live.cache._lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    try:
        got = _in_child(lambda: {"names": sorted(collect(reader))}, timeout=10)
    finally:
        release.set()
        holder.join()
    assert "process.memory.usage" in got["names"]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_parent_is_unaffected_by_the_child(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    inst = instrument()
    collect(reader)
    _in_child(lambda: {"n": len(collect(reader))})
    live = inst._metrics._live
    assert live is not None
    assert live.cache.facts.pid == os.getpid()
    rss = value(collect(reader)["process.memory.usage"])
    with open("/proc/self/statm") as f:
        assert abs(rss - int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")) < (8 << 20)


# -- the SDK fork guard, on whichever SDK is installed ------------------------------------


# Forking while another thread holds a lock is the point of this test (Python 3.12+ warns).
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_sdk_collection_lock_held_at_fork_does_not_hang_the_child(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader, provider: Any
) -> None:
    from opentelemetry.instrumentation.process import sdk_fork_guard as forks

    instrument()
    found = forks.consumer_lock(provider)
    if found is None:
        pytest.skip("this SDK keeps no collection lock where the guard looks (see the next test)")
    lock = found[1]
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(0.3)  # a collection in flight, let go while the fork waits

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    try:
        # Unguarded, the child would inherit the lock held and wait on it forever.
        got = _in_child(lambda: {"pid": os.getpid(), "names": sorted(collect(reader))}, timeout=5)
    finally:
        release.set()
        holder.join()
    assert got["pid"] != os.getpid()
    assert "process.memory.usage" in got["names"]


def test_fork_guard_is_a_no_op_with_one_debug_line_where_the_sdk_differs(
    instrument: Callable[..., ProcessInstrumentor],
    reader: InMemoryMetricReader,
    provider: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from opentelemetry.instrumentation.process import sdk_fork_guard as forks

    instrument()
    # An SDK that keeps its collection lock elsewhere: the guard must not guess.
    monkeypatch.delattr(provider, "_measurement_consumer")
    monkeypatch.setattr(forks, "_said_unsupported", False)
    caplog.set_level(logging.DEBUG, logger=forks.__name__)
    assert forks.consumer_lock(provider) is None
    for _ in range(2):
        got = _in_child(lambda: {"pid": os.getpid(), "names": sorted(collect(reader))})
        assert got["pid"] != os.getpid() and "process.memory.usage" in got["names"]
    said = [r for r in caplog.records if r.name == forks.__name__]
    assert [r.levelno for r in said] == [logging.DEBUG], [r.getMessage() for r in said]
    assert "MeterProvider" in said[0].getMessage()
