"""Three ways a fork leaves an OpenTelemetry SDK child waiting forever (Linux or macOS).

Each case forks while another thread is inside one of the SDK's critical
sections, then gives the child 2 s to do what it should: each prints False
on opentelemetry-sdk 1.28.0 to 1.45.2. Case 3 holds the lock the export
thread takes for a moment each time it wakes: a fork lands there by chance
otherwise. Case 4 is no hang: a reader shut down before the fork still starts
an export thread in the child.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
    PeriodicExportingMetricReader,
)

PARENT = os.getpid()


def in_child(check: Callable[[], object]) -> bool:
    """Fork; whether ``check()`` returned within 2 s in the child."""
    pid = os.fork()
    if pid == 0:
        worker = threading.Thread(target=check, daemon=True)
        worker.start()
        worker.join(2)
        os._exit(1 if worker.is_alive() else 0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


class Exporter(MetricExporter):
    """Records who exported; in the parent, an export waits for ``release`` (a slow network)."""

    def __init__(self, slow: bool = False) -> None:
        super().__init__()
        self.slow, self.entered, self.release = slow, threading.Event(), threading.Event()
        self.exported: list[int] = []

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
        if self.slow and os.getpid() == PARENT:
            self.entered.set()
            self.release.wait()
        self.exported.append(os.getpid())
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


def collection_in_flight() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow_callback(_options: Any) -> list[Any]:
        if os.getpid() == PARENT:
            entered.set()
            release.wait()
        return []

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    provider.get_meter("repro").create_observable_gauge("slow", callbacks=[slow_callback])
    collector = threading.Thread(target=reader.collect)
    collector.start()
    entered.wait()
    print("1. fork during a collection: the child collects:", in_child(reader.collect))
    release.set()
    collector.join()


def export_in_flight() -> None:
    exporter = Exporter(slow=True)
    periodic = PeriodicExportingMetricReader(exporter, export_interval_millis=math.inf)
    provider = MeterProvider(metric_readers=[periodic], shutdown_on_exit=False)
    provider.get_meter("repro").create_counter("requests").add(1)
    flusher = threading.Thread(target=provider.force_flush)
    flusher.start()
    exporter.entered.wait()
    print("2. fork during an export: the child flushes:", in_child(provider.force_flush))
    exporter.release.set()
    flusher.join()


def export_thread_waking() -> None:
    exporter = Exporter()
    periodic = PeriodicExportingMetricReader(exporter, export_interval_millis=20)
    provider = MeterProvider(metric_readers=[periodic], shutdown_on_exit=False)
    provider.get_meter("repro").create_counter("requests").add(1)
    held, release = threading.Event(), threading.Event()

    def wake() -> None:  # Event.wait() enters this condition as the export thread wakes
        with periodic._shutdown_event._cond:  # type: ignore[attr-defined]
            held.set()
            release.wait()

    waker = threading.Thread(target=wake)
    waker.start()
    held.wait()

    def exports() -> None:
        while os.getpid() not in exporter.exported:
            threading.Event().wait(0.01)

    print(
        "3. fork while the export thread wakes: the child exports:",
        in_child(exports),
        "and shuts down:",
        in_child(provider.shutdown),
    )
    release.set()
    waker.join()
    provider.shutdown()


def reader_shut_down() -> None:
    periodic = PeriodicExportingMetricReader(Exporter(), export_interval_millis=60_000)
    provider = MeterProvider(metric_readers=[periodic], shutdown_on_exit=False)
    provider.shutdown()
    stopped = periodic._daemon_thread  # type: ignore[attr-defined]

    def no_new_thread() -> None:  # the child's hook replaces the (ended) export thread
        while periodic._daemon_thread is not stopped:  # type: ignore[attr-defined]
            threading.Event().wait(0.01)

    print("4. fork after a shutdown: the child starts no export thread:", in_child(no_new_thread))


if __name__ == "__main__":
    collection_in_flight()
    export_in_flight()
    export_thread_waking()
    reader_shut_down()
