"""An application with no OpenTelemetry code: ``opentelemetry-instrument`` adds metrics.

``opentelemetry-instrument`` loads every installed instrumentor, this package's
(entry point ``process``) among them, and configures the SDK from the
environment. Nothing below imports OpenTelemetry::

    export OTEL_SERVICE_NAME=instrument-example
    export OTEL_METRICS_EXPORTER=console        # or otlp, prometheus
    export OTEL_TRACES_EXPORTER=none OTEL_LOGS_EXPORTER=none
    export OTEL_METRIC_EXPORT_INTERVAL=5000     # milliseconds
    # This package's options, all optional:
    export OTEL_PYTHON_PROCESS_METRICS_EXCLUDE='cpython.gc.*'
    export OTEL_PYTHON_PROCESS_METRICS_INCLUDE='process.signals_pending'
    # The project's venv also holds opentelemetry-instrumentation-system-metrics,
    # which opentelemetry-instrument would turn on too: keep it out (a venv
    # without it needs no such line).
    export OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=system_metrics
    opentelemetry-instrument python examples/instrument/app.py

``EXAMPLE_SECONDS`` is how long it works (default 10); SIGTERM stops it early.
The SDK exports one last time at exit.
"""

from __future__ import annotations

import os
import signal
import threading
import time


def handle_request(n: int) -> int:
    """Stand-in for real work: some CPU, some short-lived memory."""
    data = [i * i for i in range(50_000 + n)]
    return sum(data) % 97


def main() -> None:
    # Stop cleanly on SIGTERM (docker stop, kill): the SDK exports one last
    # time at a normal exit, never when the process is killed by a signal.
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    deadline = time.monotonic() + float(os.environ.get("EXAMPLE_SECONDS", "10"))
    handled = 0
    while time.monotonic() < deadline and not stopping.is_set():
        handle_request(handled)
        handled += 1
        time.sleep(0.01)
    print(f"handled {handled} requests in pid {os.getpid()}", flush=True)


if __name__ == "__main__":
    main()
