"""The three SDK faults that ``sdk_fork_guard.py`` works around, each on the SDK alone and guarded.

Each scenario runs twice (docs/sdk-fork.md, the report for upstream, gives the
same reproductions):

- ``sdk-alone``: a provider of the SDK with nothing of this package on it. The
  fault shows: the child waits forever. When an SDK fixes it, this case fails,
  and the guard for it can go for that SDK.
- ``guarded``: the same, with this package's metrics on the provider. The
  child must not wait: this case fails without the guard.

A fork lands inside the SDK's critical section, held there by a callback, an
exporter or a thread that does what the export thread does; the parent lets
go after 0.3 s, which a guarded fork waits out (it waits up to 1 s). The
child tries for a bounded time in a thread of its own.
"""

from __future__ import annotations

import importlib.metadata
import io
import math
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    InMemoryMetricReader,
    MetricReader,
    PeriodicExportingMetricReader,
)

from opentelemetry.instrumentation.process import ProcessMetrics
from opentelemetry.instrumentation.process import sdk_fork_guard as forks

from .support.exporters import Exporter
from .support.forked import HoldUp, in_child, python_env
from .support.waiting import eventually

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork"),
    # Forking while another thread is in a critical section is the point (Python 3.12+ warns).
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded"),
]

HOLD = 0.3
"""Seconds the parent holds the SDK's lock after the fork began: less than the guard waits."""


def bound(guarded: bool) -> float:
    """How long the child tries: a guarded child must get through even on a loaded machine;
    on the SDK alone the wait is forever, and any bound shows it."""
    return 10.0 if guarded else 1.5


def _returns(call: Callable[[], object], seconds: float) -> bool:
    """Run ``call`` in a thread of this (child) process; whether it returned in time."""
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(seconds)
    return not worker.is_alive()


@pytest.fixture
def on_provider() -> Iterator[Callable[[list[MetricReader], bool], MeterProvider]]:
    """A provider with ``readers``, with this package's metrics on it when ``guarded``."""
    made: list[tuple[MeterProvider, ProcessMetrics | None]] = []

    def make(readers: list[MetricReader], guarded: bool) -> MeterProvider:
        provider = MeterProvider(metric_readers=readers)
        made.append((provider, ProcessMetrics(meter_provider=provider) if guarded else None))
        return provider

    yield make
    for provider, metrics in made:
        if metrics is not None:
            metrics.close()
        provider.shutdown()


CASES = pytest.mark.parametrize("guarded", [False, True], ids=["sdk-alone", "guarded"])


@CASES
def test_1_a_fork_during_a_collection_leaves_every_collection_of_the_child_waiting(
    guarded: bool,
    on_provider: Callable[[list[MetricReader], bool], MeterProvider],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``SynchronousMeasurementConsumer._lock``, held across every callback of a collection."""
    reader = InMemoryMetricReader()
    provider = on_provider([reader], guarded)
    held = HoldUp("callback", provider, monkeypatch)  # a slow callback of another meter
    held.arm(HOLD)
    # MetricReader.collect(), as a periodic reader's export thread calls it.
    collector = threading.Thread(target=reader.collect)
    collector.start()
    try:
        assert held.entered.wait(10), "the collection never started"
        got = in_child(lambda: {"collected": _returns(reader.collect, bound(guarded))})
    finally:
        held.release()
        collector.join(10)
    assert got == {"collected": guarded}


class SlowExporter(Exporter):
    """An export that waits, in the test process only, until let go (a slow network)."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        parent = os.getpid()

        def wait() -> None:
            if os.getpid() == parent:
                self.entered.set()
                self.release.wait(10)

        super().__init__(before=wait)


@CASES
def test_2_a_fork_during_an_export_leaves_every_export_of_the_child_waiting(
    guarded: bool, on_provider: Callable[[list[MetricReader], bool], MeterProvider]
) -> None:
    """``PeriodicExportingMetricReader._export_lock``, held across each export."""
    exporter = SlowExporter()
    # No export thread: exports happen at force_flush(), a collection then an export.
    periodic = PeriodicExportingMetricReader(exporter, export_interval_millis=math.inf)
    provider = on_provider([periodic], guarded)
    provider.get_meter("test").create_counter("test.requests").add(1)  # something to export
    flusher = threading.Thread(target=provider.force_flush)
    flusher.start()
    try:
        assert exporter.entered.wait(10), "the export never started"

        def child() -> dict[str, Any]:
            flushed = _returns(lambda: provider.force_flush(5_000), bound(guarded))
            return {"flushed": flushed, "exported": exporter.exports.count(os.getpid())}

        got = in_child(child)
    finally:
        exporter.release.set()
        flusher.join(10)
    assert got == {"flushed": guarded, "exported": int(guarded)}


@CASES
def test_3_a_fork_while_the_export_thread_wakes_leaves_the_child_without_exports_or_exit(
    guarded: bool, on_provider: Callable[[list[MetricReader], bool], MeterProvider]
) -> None:
    """``PeriodicExportingMetricReader._shutdown_event._cond._lock``: the export thread holds it
    for a moment each time it wakes; the thread the SDK starts in the child then waits on it
    forever, and so does the provider's shutdown (at exit, the child never ends)."""
    exporter = Exporter()
    periodic = PeriodicExportingMetricReader(exporter, export_interval_millis=20)
    provider = on_provider([periodic], guarded)
    # Where the guard looks for it on every supported SDK: a guard that found nothing
    # there would guard nothing.
    waits = forks.wait_locks(provider)
    assert waits == [periodic._shutdown_event._cond._lock]  # type: ignore[attr-defined]
    held, release = threading.Event(), threading.Event()

    def wake() -> None:  # what the export thread does when it wakes, held longer
        with periodic._shutdown_event._cond:  # type: ignore[attr-defined]
            held.set()
            release.wait(HOLD)

    waker = threading.Thread(target=wake)
    waker.start()
    try:
        assert held.wait(10)

        def child() -> dict[str, Any]:
            exported = eventually(lambda: os.getpid() in exporter.exports, bound(guarded))
            return {"exported": exported, "shut_down": _returns(provider.shutdown, bound(guarded))}

        got = in_child(child, timeout=30)
    finally:
        release.set()
        waker.join(10)
    assert got == {"exported": guarded, "shut_down": guarded}


def test_a_held_export_lock_is_replaced_beside_readers_that_have_none() -> None:
    periodic = PeriodicExportingMetricReader(
        ConsoleMetricExporter(out=io.StringIO()), export_interval_millis=math.inf
    )
    # The in-memory reader first: it has no export lock at all.
    provider = MeterProvider(metric_readers=[InMemoryMetricReader(), periodic])
    held = periodic._export_lock
    held.acquire()  # as a thread of the parent would have left it
    try:
        forks.after_fork(provider, hooked=True)
        fresh = periodic._export_lock
        assert fresh is not held and not fresh.locked()
    finally:
        held.release()
        provider.shutdown()


# --- the report for upstream (docs/sdk-fork.md): its reproduction, and the fix it proposes

DOCS = Path(__file__).resolve().parent.parent / "docs"
SAID = (
    "1. fork during a collection: the child collects: {}",
    "2. fork during an export: the child flushes: {}",
    "3. fork while the export thread wakes: the child exports: {} and shuts down: {}",
    "4. fork after a shutdown: the child starts no export thread: {}",
)
FIXED_IN = "1.45.2"
"""The release of the SDK whose source the proposed fix is a diff against."""


def reproduce(env: dict[str, str]) -> list[str]:
    """What docs/sdk_fork_repro.py prints, run in a fresh Python with ``env``."""
    done = subprocess.run(
        [sys.executable, str(DOCS / "sdk_fork_repro.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def said(outcome: bool) -> list[str]:
    return [line.format(*[outcome] * line.count("{}")) for line in SAID]


def test_the_reproduction_in_the_report_shows_each_fault_on_this_sdk() -> None:
    assert reproduce(python_env()) == said(False)


def test_the_fix_proposed_upstream_mends_each_fault(tmp_path: Path) -> None:
    version = importlib.metadata.version("opentelemetry-sdk")
    if version != FIXED_IN:
        pytest.skip(f"the proposed fix is a diff against SDK {FIXED_IN}; this is {version}")
    patch = shutil.which("patch")
    if patch is None:
        pytest.skip("patch is not installed")
    import opentelemetry.sdk.metrics

    # A copy of this SDK, patched, first on the path of a fresh Python.
    sdk = Path(opentelemetry.sdk.metrics.__file__).parent.parent  # a namespace package
    shutil.copytree(sdk, tmp_path / "opentelemetry" / "sdk")
    fix = DOCS / "sdk_fork_fix.diff"
    subprocess.run([patch, "-p3", "-s", "-i", str(fix)], cwd=tmp_path, check=True, timeout=60)
    env = python_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    assert reproduce(env) == said(True)
