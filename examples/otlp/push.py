"""Push this process's metrics to an OpenTelemetry Collector over OTLP (gRPC or HTTP).

Everything comes from the standard OpenTelemetry environment variables, which
the SDK and the exporters read themselves:

- ``OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`` (or ``OTEL_EXPORTER_OTLP_PROTOCOL``):
  ``grpc`` (the default) or ``http/protobuf``; ``--protocol`` overrides both.
- ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default ``http://localhost:4317`` for gRPC,
  ``http://localhost:4318`` for HTTP, which appends ``/v1/metrics``), or
  ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``, used as given.
- ``OTEL_METRIC_EXPORT_INTERVAL``: milliseconds between exports (default 60000).
- ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``: who is reporting.
- ``OTEL_PYTHON_PROCESS_METRICS_*``: what is reported (see the configuration reference).

``EXAMPLE_SECONDS`` stops it after that many seconds (default: run until Ctrl-C).
There is always one last export at exit.

Run it against the collector config next to it::

    otelcol --config examples/otlp/otelcol-config.yaml &
    OTEL_METRIC_EXPORT_INTERVAL=5000 python examples/otlp/push.py                # gRPC
    python examples/otlp/push.py --protocol http/protobuf                         # HTTP
"""

from __future__ import annotations

import argparse
import os
import signal
import threading

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor

PROTOCOLS = ("grpc", "http/protobuf")


def protocol_from_env() -> str:
    return (
        os.environ.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    ).strip()


def otlp_exporter(protocol: str) -> MetricExporter:
    """The OTLP exporter for ``protocol``; endpoint, headers and TLS come from the environment."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc import metric_exporter as grpc

        return grpc.OTLPMetricExporter()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http import metric_exporter as http

        return http.OTLPMetricExporter()
    raise SystemExit(f"unsupported OTLP protocol {protocol!r}; use one of {', '.join(PROTOCOLS)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=PROTOCOLS, default=protocol_from_env())
    args = parser.parse_args()

    # The reader takes its interval from OTEL_METRIC_EXPORT_INTERVAL.
    reader = PeriodicExportingMetricReader(otlp_exporter(args.protocol))
    # The resource (service.name, service.instance.id, ...) comes from
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
    provider = MeterProvider(metric_readers=[reader])
    ProcessInstrumentor().instrument(meter_provider=provider)
    print(f"pushing process metrics over OTLP ({args.protocol}); pid {os.getpid()}", flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    seconds = os.environ.get("EXAMPLE_SECONDS")
    try:
        stop.wait(float(seconds) if seconds else None)
    except KeyboardInterrupt:
        pass
    finally:
        provider.shutdown()  # one last export, with the metrics as they are now


if __name__ == "__main__":
    main()
