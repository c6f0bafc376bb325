"""Opt in to the CPU frequency metrics, and print what this host reports.

CPU frequency is off by default: on Linux it is read per CPU from sysfs (or
/proc/cpuinfo), which costs more than everything else together on many-core
hosts. Turn it on in code, as here, or with
``OTEL_PYTHON_PROCESS_METRICS_CPU_FREQUENCY=true``. It adds:

- ``system.cpu.frequency`` (Hz, per ``cpu.logical_number``), where the host says;
- ``process_metrics.cpu.frequency.min`` and ``.max`` (extensions), where the
  host exposes its limits. Many VMs and containers do not: these are then left
  out, never reported as 0.

``EXAMPLE_SECONDS`` (default 3) and ``EXAMPLE_INTERVAL_MS`` (default 1000)
set how long it runs and how often it exports.
"""

from __future__ import annotations

import os
import time

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricsData,
    NumberDataPoint,
    PeriodicExportingMetricReader,
)

from opentelemetry.instrumentation.process import ProcessInstrumentor

FREQUENCY_METRICS = (
    "system.cpu.frequency",
    "process_metrics.cpu.frequency.min",
    "process_metrics.cpu.frequency.max",
)


def frequency_lines(data: MetricsData) -> str:
    """One line per frequency point, in MHz for reading; the metrics themselves are in Hz."""
    lines = ["--- export ---"]
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name not in FREQUENCY_METRICS:
                    continue
                for point in metric.data.data_points:
                    if not isinstance(point, NumberDataPoint):
                        continue
                    attrs = ", ".join(f"{k}={v}" for k, v in (point.attributes or {}).items())
                    mhz = point.value / 1e6
                    lines.append(f"{metric.name}{{{attrs}}} = {point.value} Hz ({mhz:.0f} MHz)")
    return "\n".join(lines) + "\n"


def main() -> None:
    seconds = float(os.environ.get("EXAMPLE_SECONDS", "3"))
    interval = int(os.environ.get("EXAMPLE_INTERVAL_MS", "1000"))
    reader = PeriodicExportingMetricReader(
        ConsoleMetricExporter(formatter=frequency_lines), export_interval_millis=interval
    )
    provider = MeterProvider(metric_readers=[reader])
    ProcessInstrumentor().instrument(meter_provider=provider, cpu_frequency=True)
    time.sleep(seconds)
    provider.shutdown()


if __name__ == "__main__":
    main()
