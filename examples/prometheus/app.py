"""Serve this process's metrics for Prometheus to scrape, with opentelemetry-exporter-prometheus.

The metrics are read when Prometheus scrapes ``/metrics``: one snapshot per
scrape. Address and port come from the variables that
``OTEL_METRICS_EXPORTER=prometheus`` also uses::

    OTEL_EXPORTER_PROMETHEUS_HOST=127.0.0.1 OTEL_EXPORTER_PROMETHEUS_PORT=9464 \\
        python examples/prometheus/app.py
    curl -s http://127.0.0.1:9464/metrics | grep ^process_

``EXAMPLE_SECONDS`` stops it after that many seconds (default: run until Ctrl-C).
Prometheus then needs a scrape job such as::

    scrape_configs:
      - job_name: my-service
        static_configs: [{targets: ["127.0.0.1:9464"]}]
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

import prometheus_client
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider

from opentelemetry.instrumentation.process import ProcessInstrumentor


def drop_prometheus_client_defaults() -> None:
    """Unregister prometheus_client's own process, platform and GC collectors.

    They would report much the same data a second time under other names
    (``process_cpu_seconds_total``, ``process_resident_memory_bytes``,
    ``python_gc_*``), each read separately on every scrape.
    """
    for collector in (
        prometheus_client.PROCESS_COLLECTOR,
        prometheus_client.PLATFORM_COLLECTOR,
        prometheus_client.GC_COLLECTOR,
    ):
        with contextlib.suppress(KeyError):  # already gone
            prometheus_client.REGISTRY.unregister(collector)


def main() -> None:
    host = os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", "localhost")
    port = int(os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT", "9464"))

    drop_prometheus_client_defaults()
    # The reader registers itself with prometheus_client's default registry.
    provider = MeterProvider(metric_readers=[PrometheusMetricReader()])
    ProcessInstrumentor().instrument(meter_provider=provider)
    server, thread = prometheus_client.start_http_server(port, addr=host)
    print(f"serving metrics on http://{host}:{server.server_port}/metrics", flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    seconds = os.environ.get("EXAMPLE_SECONDS")
    try:
        stop.wait(float(seconds) if seconds else None)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        thread.join()
        provider.shutdown()


if __name__ == "__main__":
    main()
