"""The README's demo: instrument a small workload and print its metrics.

A thread runs a CPU-bound Python loop that allocates 64 KiB buffers. Every
interval, the metrics are collected and printed, one line per metric, with
readable units. Environment: DEMO_SECONDS (default 3), DEMO_INTERVAL_MS
(default 1000).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Sequence

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricsData,
    PeriodicExportingMetricReader,
)

from opentelemetry.instrumentation.process import SCOPE_NAME, ProcessInstrumentor

NOTES = {
    "process.cpu.utilization": "one busy thread: about 1 / the CPUs available",
    "process_metrics.refresh.cpu_time": "what this collection's refresh cost",
    "process_metrics.refresh.duration": "wall time: also the waits for the GIL",
}


def readable(value: float, unit: str) -> str:
    """``value`` in ``unit``, as a person would write it."""
    if unit == "1":
        return f"{value * 100:.1f} %"
    if unit == "By":
        return f"{value / 2**20:,.1f} MiB" if value >= 2**20 else f"{value:,.0f} B"
    if unit == "s":
        return f"{value * 1000:.2f} ms" if abs(value) < 1 else f"{value:,.3f} s"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.3g}"
    return f"{value:,.0f}"


class Printer:
    """Formats each export as one line per metric, and numbers the exports."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.count = 0
        self.start = time.monotonic()

    def __call__(self, data: MetricsData) -> str:
        lines = [self._line(m.name, m.unit, m.data.data_points) for m in self._ours(data)]
        if not lines:  # the export at shutdown, after uninstrument()
            return ""
        self.count += 1
        elapsed = time.monotonic() - self.start
        head = f"\n== export {self.count} of {self.total}, at {elapsed:.1f} s =="
        return "\n".join([head, *lines]) + "\n"

    @staticmethod
    def _ours(data: MetricsData) -> list[object]:
        return [
            metric
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            if sm.scope.name == SCOPE_NAME
            for metric in sm.metrics
        ]

    @staticmethod
    def _line(name: str, unit: str, points: Sequence[object]) -> str:
        parts = []
        for point in points:
            attrs = getattr(point, "attributes", {}) or {}
            # A number alone says little: "generation 0" rather than "0".
            label = ",".join(
                v if isinstance(v, str) else f"{k.rsplit('.', 1)[-1]} {v}" for k, v in attrs.items()
            )
            shown = readable(getattr(point, "value", math.nan), unit)
            parts.append(f"{label}={shown}" if label else shown)
        note = f"   <- {NOTES[name]}" if name in NOTES else ""
        return f"{name:<44} {'  '.join(parts)}{note}"


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


if __name__ == "__main__":
    main()
