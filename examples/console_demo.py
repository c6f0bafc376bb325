"""The README's demo: instrument a small workload and print its metrics.

A thread runs a CPU-bound Python loop that allocates 64 KiB buffers. Every
interval, the metrics are collected and printed, one line per metric, with
readable units, by the package's own printer (the one of
``python -m opentelemetry.instrumentation.process``). Environment:
DEMO_SECONDS (default 3), DEMO_INTERVAL_MS (default 1000).
"""

from __future__ import annotations

import math
import os
import textwrap
import threading
import time

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricsData,
    PeriodicExportingMetricReader,
)

from opentelemetry.instrumentation.process import SCOPE_NAME, ProcessInstrumentor
from opentelemetry.instrumentation.process.printer import Point, footnotes, table

NOTES = {
    "process.cpu.utilization": "one busy thread: about 1 / the CPUs available",
    "process_metrics.refresh.cpu_time": "what this collection's refresh cost",
    "process_metrics.refresh.duration": "wall time: also the waits for the GIL",
}


class Printer:
    """Formats each export as one line per metric, and numbers the exports."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.count = 0
        self.start = time.monotonic()
        self.names: set[str] = set()
        """The metrics printed so far, for the notes under the last table."""

    def __call__(self, data: MetricsData) -> str:
        points = list(self._points(data))
        if not points:  # the export at shutdown, after uninstrument()
            return ""
        self.count += 1
        self.names.update(p.name for p in points)
        elapsed = time.monotonic() - self.start
        head = f"\n== export {self.count} of {self.total}, at {elapsed:.1f} s =="
        return "\n".join([head, *table(points, NOTES)]) + "\n"

    @staticmethod
    def _points(data: MetricsData) -> list[Point]:
        return [
            Point(metric.name, metric.unit, dict(point.attributes or {}), point.value)
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            if sm.scope.name == SCOPE_NAME
            for metric in sm.metrics
            for point in metric.data.data_points
            if isinstance(point.value, (int, float))  # every point of this package is a number
        ]


def workload(stop: threading.Event) -> None:
    """Burn CPU and allocate a little memory, as a busy service would."""
    keep = []
    while not stop.is_set():
        keep.append(bytearray(64 * 1024))
        sum(i * i for i in range(20_000))
        if len(keep) > 200:
            keep.clear()


def main() -> None:
    seconds = float(os.environ.get("DEMO_SECONDS", "3"))
    interval = int(os.environ.get("DEMO_INTERVAL_MS", "1000")) / 1000
    exports = max(1, round(seconds / interval))
    printer = Printer(exports)
    # The demo collects on its own clock (force_flush), so that "3 s at 1 s"
    # prints exactly 3 exports.
    reader = PeriodicExportingMetricReader(
        ConsoleMetricExporter(formatter=printer), export_interval_millis=math.inf
    )
    provider = MeterProvider(metric_readers=[reader])
    ProcessInstrumentor().instrument(meter_provider=provider)
    print(
        f"Process metrics of this demo, {exports} exports, one every {interval:g} s.\n"
        "The workload: one thread runs a CPU-bound Python loop that allocates 64 KiB "
        "buffers.\nMetrics with several points show attribute=value; the process.*, "
        "cpython.* and process_metrics.* lines are this process, system.* the host."
    )
    stop = threading.Event()
    worker = threading.Thread(target=workload, args=(stop,), name="demo-workload")
    worker.start()
    try:
        for n in range(1, exports + 1):
            time.sleep(max(0.0, printer.start + n * interval - time.monotonic()))
            provider.force_flush()
    finally:
        stop.set()
        worker.join()
        ProcessInstrumentor().uninstrument()
        provider.shutdown()
    for note in footnotes(printer.names):
        print("\n" + textwrap.fill(f"Note: {note}", 100))


if __name__ == "__main__":
    main()
