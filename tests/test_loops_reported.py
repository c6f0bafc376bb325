"""The event-loop metrics through the real instrumentor, on a real SDK.

Each figure is checked against the length of each ``time.sleep`` that blocks
a loop, how late a timer of the test's beside the app ran (the loop's own
truth), and asyncio's own queues and selector. Either metric selected puts
the hook on each loop's ``select``; neither, none.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric

from opentelemetry.instrumentation.process import (
    ProcessInstrumentor,
    ProcessMetricsOptions,
    watch_loop,
)
from opentelemetry.instrumentation.process.facts import read_facts
from opentelemetry.instrumentation.process.faultlog import FaultLog
from opentelemetry.instrumentation.process.probes.loops.monitor import LoopMonitor
from opentelemetry.instrumentation.process.sources import runtime as runtime_sources
from opentelemetry.instrumentation.process.sources.base import ReadContext

from .conftest import Sdk, collect, reported
from .support.gc import collector_paused  # noqa: F401 - autouse
from .support.loopapps import (
    DELAY_MAX,
    DELAY_MEAN,
    DELAY_P50,
    DELAY_P99,
    LOOP_METRICS,
    UTILIZATION,
    WATCH,
    by_loop,
    hooked,
    hooks_installed,
    idle_loop,
    in_thread,
    loops_blocking,
    package_handles,
    periodic_app,
    uvloop,
    watched,
)

# The instrumentor's virtual ticks fall due every 20 ms (the monitor's default
# interval). A loop blocked for b reads a maximum delay of at least
# b - INTERVAL: a tick falls due at most one interval into the block, and is
# read at the next select, when it ends. At most, as late as a timer of the
# test's beside the app ran, plus its period (support.loopapps.watched).
INTERVAL = 0.02


def assert_blocked(
    metrics: dict[str, Metric], label: str, blocks: list[float], stalls: list[float]
) -> None:
    """The window of a loop blocked ``blocks`` times reads as the module docstring says."""
    top = by_loop(metrics, DELAY_MAX)[label]
    low, high = max(blocks) - INTERVAL, max(stalls) + WATCH
    assert low <= top <= high, (top, blocks, max(stalls))
    p99 = by_loop(metrics, DELAY_P99)[label]
    assert p99 <= top
    # Most ticks fall due outside the blocks: the median is not a block's.
    assert by_loop(metrics, DELAY_P50)[label] < min(blocks) / 2
    assert 0 < by_loop(metrics, DELAY_MEAN)[label] < top


# --- the truth


def test_a_loop_blocked_once_a_second_reports_the_block_as_its_maximum_delay(sdk: Sdk) -> None:
    """instrument() before any loop exists (the opentelemetry-instrument case)."""
    sdk.instrument(event_loop=True)
    blocks: list[float] = []
    stalls: list[float] = []
    t0 = time.monotonic()
    asyncio.run(watched(periodic_app(blocks), stalls)())
    ran = time.monotonic() - t0
    got = sdk.collect()
    assert set(by_loop(got, DELAY_MAX)) == {"MainThread"}
    assert len(blocks) == 3
    assert_blocked(got, "MainThread", blocks, stalls)
    # A tick every 20 ms for 3 s, 10 of each 150 in a block: over 1 %, so the p99 is one.
    p99 = by_loop(got, DELAY_P99)["MainThread"]
    assert min(blocks) - INTERVAL <= p99
    # Busy at least for its blocks, over a run no longer than the test's clock saw; the
    # rest of its work (its own timer's, every 2 ms) is far less than 10 % of the run.
    busy = by_loop(got, UTILIZATION)["MainThread"]
    assert sum(blocks) / ran <= busy <= sum(blocks) / ran + 0.1, (busy, blocks, ran)


def test_an_idle_loop_reads_no_later_than_it_woke(sdk: Sdk) -> None:
    """Each tick due in its one long wait reads that wait's lateness, or less."""
    sdk.instrument(event_loop=True)
    t0 = time.monotonic()
    asyncio.run(asyncio.sleep(1.0))
    late = time.monotonic() - t0 - 1.0  # its timer was due no earlier than t0 + 1
    got = sdk.collect()
    top = by_loop(got, DELAY_MAX)["MainThread"]
    median = by_loop(got, DELAY_P50)["MainThread"]
    mean = by_loop(got, DELAY_MEAN)["MainThread"]
    assert 0 <= median <= top <= late and mean <= top, (median, mean, top, late)
    assert by_loop(got, UTILIZATION)["MainThread"] < 0.1


def test_instrument_inside_a_running_loop(
    provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    blocks: list[float] = []
    stalls: list[float] = []
    inst = ProcessInstrumentor()

    async def app() -> dict[str, Metric]:
        inst.instrument(meter_provider=provider, event_loop=True)
        await periodic_app(blocks, count=1, every=0.5)()
        return collect(reader)  # from inside the loop, as a pull exporter would

    try:
        got = asyncio.run(watched(app, stalls)())
    finally:
        inst.uninstrument()
    assert set(by_loop(got, DELAY_MAX)) == {"MainThread"}
    assert_blocked(got, "MainThread", blocks, stalls)


@pytest.mark.skipif(uvloop is None, reason="uvloop is not installed")
def test_a_uvloop_loop_is_not_reported_and_runs_as_without_the_package(sdk: Sdk) -> None:
    """No Python select to hook, a clock of its own: not probed (docs/runtime.md)."""
    assert uvloop is not None
    before = dict(vars(uvloop.Loop))
    sdk.instrument(event_loop=True)
    blocks: list[float] = []
    uvloop.run(periodic_app(blocks, count=1, every=0.2, block=0.05)())
    got = sdk.collect()
    assert len(blocks) == 1
    assert not set(LOOP_METRICS) & set(got)
    assert dict(vars(uvloop.Loop)) == before


def test_loops_in_several_threads_are_one_series_each(sdk: Sdk) -> None:
    """Each thread blocks for its own length; each series shows its own loop's block.

    Each loop's upper bound is its own timer's: four loops and this thread
    share 2 cores with other jobs. A fourth loop, uvloop's, has no series.
    """
    sdk.instrument(event_loop=True)
    lengths = {"alpha": 0.05, "beta": 0.3, "gamma": 0.6}
    with loops_blocking(lengths, unprobed="delta" if uvloop else None) as seen:
        got = sdk.collect()
    for name in LOOP_METRICS:
        assert set(by_loop(got, name)) == set(lengths), name
    for name, length in lengths.items():
        top = by_loop(got, DELAY_MAX)[name]
        low, high = max(seen.blocks[name]) - INTERVAL, max(seen.stalls[name]) + WATCH
        assert low <= top <= high, (name, top, seen.blocks[name], length)


def test_a_closed_loop_leaves_no_series_at_the_next_collection(sdk: Sdk) -> None:
    sdk.instrument(event_loop=True)
    thread = in_thread("short-lived", lambda: asyncio.run(asyncio.sleep(0.3)))
    thread.join(10)
    last = sdk.collect()
    assert "short-lived" in by_loop(last, DELAY_MAX)  # its last window, once
    after = sdk.collect()
    for name in LOOP_METRICS:
        assert "short-lived" not in by_loop(after, name), name


_EXITS = textwrap.dedent(
    """
    import asyncio, sys, threading
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.instrumentation.process import ProcessInstrumentor

    reader = InMemoryMetricReader()
    ProcessInstrumentor().instrument(
        meter_provider=MeterProvider(metric_readers=[reader]), event_loop=True
    )
    run = asyncio.run
    if sys.argv[1] == "uvloop":
        import uvloop  # not probed: no series, and nothing kept alive
        run = uvloop.run

    async def main():
        await asyncio.sleep(0.3)

    # A loop in a thread that is not a daemon, and one in the main thread.
    worker = threading.Thread(target=lambda: run(main()), name="worker")
    worker.start()
    run(main())
    worker.join()
    print(sorted(
        p.attributes["thread.name"]
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "process_metrics.eventloop.delay.max"
        for p in m.data.data_points
    ))
    """
)


@pytest.mark.parametrize("runner", ["asyncio", "uvloop"])
def test_the_probe_never_keeps_a_process_alive(runner: str) -> None:
    if runner == "uvloop" and uvloop is None:
        pytest.skip("uvloop is not installed")
    # A probe that kept its loop or the process alive would hang here until the timeout.
    done = subprocess.run(
        [sys.executable, "-c", _EXITS, runner], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    expected = "['MainThread', 'worker']" if runner == "asyncio" else "[]"
    assert done.stdout.strip() == expected, done.stdout
    assert done.stderr == ""


_UVLOOP_LATE = textwrap.dedent(
    """
    import asyncio, json, time
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.instrumentation.process import ProcessInstrumentor

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    inst = ProcessInstrumentor()
    inst.instrument(meter_provider=provider, event_loop=True)
    import uvloop  # while reporting runs: it keeps the wrapped asyncio function
    before = dict(vars(uvloop.Loop))

    def loops():
        data = reader.get_metrics_data()
        return {
            p.attributes["thread.name"]: p.value
            for rm in (data.resource_metrics if data else ())
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "process_metrics.eventloop.delay.max"
            for p in m.data.data_points
        }

    async def main():
        await asyncio.sleep(0.2)
        time.sleep(0.1)
        await asyncio.sleep(0.05)
        return "ran"

    ran = [uvloop.run(main())]
    during = loops()
    inst.uninstrument()
    ran.append(uvloop.run(main()))  # through the kept wrapper, which only passes the call on
    after = loops()
    inst.instrument(meter_provider=provider, event_loop=True)
    ran.append(uvloop.run(main()))
    again = loops()
    inst.uninstrument()
    untouched = dict(vars(uvloop.Loop)) == before
    print(json.dumps({"ran": ran, "seen": [during, after, again], "untouched": untouched}))
    """
)


def test_uvloop_imported_while_reporting_runs_is_left_alone() -> None:
    if uvloop is None:
        pytest.skip("uvloop is not installed")
    done = subprocess.run(
        [sys.executable, "-c", _UVLOOP_LATE], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got == {"ran": ["ran"] * 3, "seen": [{}, {}, {}], "untouched": True}, got
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("source", "read", "fed"),
    [
        ("asyncio_loops", "read_delays", LOOP_METRICS[:4]),
        ("asyncio_select_timing", "read_utilization", (UTILIZATION,)),
    ],
)
def test_a_failing_loop_read_drops_only_its_points_and_recovers(
    source: str,
    read: str,
    fed: tuple[str, ...],
    sdk: Sdk,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A fault injected into the monitor's read while a loop runs (test_faults has no loop)."""

    sdk.instrument(event_loop=True)
    with idle_loop("app-loop"):
        time.sleep(0.1)
        healthy = sdk.collect()
        assert set(LOOP_METRICS) <= set(healthy)
        real = getattr(LoopMonitor, read)

        def broken(self: LoopMonitor) -> Any:
            raise RuntimeError("injected")

        monkeypatch.setattr(LoopMonitor, read, broken)
        caplog.set_level(logging.DEBUG, logger="opentelemetry.instrumentation.process")
        failing = []
        for _ in range(2):
            time.sleep(0.1)  # ticks in each window: the other loop source has points
            failing.append(sdk.collect())
        monkeypatch.setattr(LoopMonitor, read, real)
        time.sleep(0.1)
        back = sdk.collect()
    for got in failing:
        assert reported(got) == reported(healthy) - set(fed)
    ours = [r.getMessage() for r in caplog.records if repr(source) in r.getMessage()]
    assert len(ours) == 2 and "failed" in ours[0] and "works again" in ours[1], ours
    assert all("app-loop" in by_loop(back, name) for name in fed)


# --- the metrics selected decide what is measured


def _one_loop(inst: Callable[[], Any], reader: InMemoryMetricReader) -> dict[str, Any]:
    """A loop in a thread, started after ``inst()``: its selector and queues, one collection."""
    blocked, release = threading.Event(), threading.Event()
    holder: dict[str, Any] = {}
    stalls: list[float] = []

    async def app() -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.2)
        holder["hooked"] = hooked(loop)
        time.sleep(0.1)  # a block: a delay, and busy time
        await asyncio.sleep(0)  # the next select reads the ticks due in the block
        holder["handles"] = package_handles(loop)
        blocked.set()
        await loop.run_in_executor(None, release.wait, 10)

    inst()
    thread = in_thread("app-loop", lambda: asyncio.run(watched(app, stalls)()))
    try:
        assert blocked.wait(10)  # not a fixed sleep: a loaded host may stall the loop
        got = collect(reader)
    finally:
        release.set()
        thread.join(10)
    stalled = max(stalls)  # the timer due in the block may run after the collection
    delays, busy = by_loop(got, DELAY_MAX), by_loop(got, UTILIZATION)
    return {**holder, "delay": delays, "busy": busy, "stalled": stalled}


@pytest.mark.parametrize(
    "exclude",
    [[], [UTILIZATION], ["process_metrics.eventloop.delay.*"], ["process_metrics.eventloop.*"]],
    ids=["all", "no utilisation", "no delays", "neither"],
)
def test_only_what_a_selected_metric_reads_is_measured(exclude: list[str], sdk: Sdk) -> None:
    """Either part puts the hook on select, and reads only its own; neither, no hook."""
    got = _one_loop(lambda: sdk.instrument(event_loop=True, exclude=exclude), sdk.reader)
    delays = not any(
        name in exclude
        for name in ("process_metrics.eventloop.delay.*", "process_metrics.eventloop.*")
    )
    busy = not any(name in exclude for name in (UTILIZATION, "process_metrics.eventloop.*"))
    assert (got["hooked"], got["handles"]) == (delays or busy, [])
    if delays:
        assert 0.1 - INTERVAL <= got["delay"]["app-loop"] <= got["stalled"] + WATCH, got
    else:
        assert got["delay"] == {}
    if busy:
        assert 0.0 < got["busy"]["app-loop"] <= 1.0, got
    else:
        assert got["busy"] == {}


def test_instrument_inside_a_running_loop_times_its_select_too(
    provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    """The delays source opens first; the utilisation source then times the same loop."""
    inst = ProcessInstrumentor()

    async def app() -> tuple[bool, list[Any], dict[str, Metric], float]:
        t0 = time.monotonic()
        inst.instrument(meter_provider=provider, event_loop=True)
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.1)
        time.sleep(0.1)
        await asyncio.sleep(0.1)
        ran = time.monotonic() - t0
        return hooked(loop), package_handles(loop), collect(reader), ran

    try:
        on, handles, got, ran = asyncio.run(app())
    finally:
        inst.uninstrument()
    assert (on, handles) == (True, [])
    # Busy at least for the block, over a run no longer than the test's clock saw.
    assert 0.1 / ran <= by_loop(got, UTILIZATION)["MainThread"] <= 1.0


def test_a_loop_running_before_instrument_is_reported_once_watched(
    provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    running, release = threading.Event(), threading.Event()
    holder: dict[str, Any] = {}

    async def app() -> None:
        holder["loop"] = asyncio.get_running_loop()
        running.set()
        while not release.is_set():
            await asyncio.sleep(0.02)

    thread = in_thread("early", lambda: asyncio.run(app()))
    inst = ProcessInstrumentor()
    try:
        assert running.wait(10)
        inst.instrument(meter_provider=provider, event_loop=True)
        time.sleep(0.1)
        before = by_loop(collect(reader), DELAY_MAX)
        watch_loop(holder.pop("loop"))
        # Its begin runs in its own thread, which a loaded host may stall: collect until
        # it shows (it always does once begun), within a generous deadline.
        deadline = time.monotonic() + 10
        while True:
            time.sleep(0.2)
            after = collect(reader)
            shown = "early" in by_loop(after, DELAY_MAX) and "early" in by_loop(after, UTILIZATION)
            if shown or time.monotonic() > deadline:
                break
    finally:
        release.set()
        thread.join(10)
        inst.uninstrument()
    assert before == {}  # running before instrument(): not seen until it starts again
    assert "early" in by_loop(after, DELAY_MAX)
    assert "early" in by_loop(after, UTILIZATION)


def test_closing_the_loops_source_that_never_opened_does_nothing() -> None:
    process = psutil.Process()
    ctx = ReadContext(
        process=process,
        facts=read_facts(process, cpu_frequency=False),
        options=ProcessMetricsOptions(),
        faults=FaultLog(),
        direct=False,
    )
    before = (asyncio.events._set_running_loop, hooks_installed())
    runtime_sources._close_loops(ctx)
    assert ctx.state == {}
    assert (asyncio.events._set_running_loop, hooks_installed()) == before
