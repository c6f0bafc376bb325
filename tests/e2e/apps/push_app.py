"""An application instrumented in code, pushing its process metrics over OTLP.

    python push_app.py grpc|http

The SDK is set up the usual way: a MeterProvider with a periodic reader and an
OTLP exporter, made global, then ``ProcessInstrumentor().instrument()``. The
exporter reads its endpoint and timeout from the standard ``OTEL_EXPORTER_OTLP_*``
variables, the reader its interval from ``OTEL_METRIC_EXPORT_INTERVAL``, the
resource ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``.

What the tests need to check the values, from ``E2E_*`` variables:
``E2E_BALLAST_MB`` bytes kept resident; ``E2E_BURN_S`` CPU seconds burned at
start; ``E2E_WORK=1`` keeps doing small units of work (allocations, CPU) instead
of idling; ``E2E_SECONDS`` ends it (default 120), as does SIGTERM. It prints
``ready`` once instrumented and ``beat N`` after each unit of work or idle tick.

For the saturation group: ``E2E_CGROUPS``, cgroup folders (separated by
``os.pathsep``) that it moves itself into before it is instrumented;
``E2E_BUSY_S``, seconds after ``ready`` during which each beat also burns
100 ms of CPU (to be throttled by a quota), idle afterwards;
``E2E_OOM_MB``, the size of a grandchild it starts once, about 2 s after
``ready``, to be killed by the OOM killer (it prints ``oom <returncode>``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader

from opentelemetry import metrics
from opentelemetry.instrumentation.process import ProcessInstrumentor


def exporter(protocol: str) -> MetricExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter()
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HTTPExporter,
        )

        return HTTPExporter()
    raise SystemExit(f"protocol must be grpc or http, not {protocol!r}")


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    x = 0
    while time.process_time() < end:
        x += sum(range(1000))


GRANDCHILD = """
import sys
with open("/proc/self/oom_score_adj", "w") as f:
    f.write("1000")  # the OOM killer's first choice in the cgroup
block = bytearray(b"\\x01") * (int(sys.argv[1]) << 20)
"""


def join_cgroups() -> None:
    for folder in filter(None, os.environ.get("E2E_CGROUPS", "").split(os.pathsep)):
        with open(os.path.join(folder, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def main() -> None:
    join_cgroups()
    # Touched, so that it is resident: b"..." * n writes every page.
    ballast = b"\xa5" * (int(os.environ.get("E2E_BALLAST_MB", "0")) << 20)
    burn(float(os.environ.get("E2E_BURN_S", "0")))
    work = os.environ.get("E2E_WORK") == "1"
    busy_s = float(os.environ.get("E2E_BUSY_S", "0"))
    oom_mb = int(os.environ.get("E2E_OOM_MB", "0"))

    provider = MeterProvider(metric_readers=[PeriodicExportingMetricReader(exporter(sys.argv[1]))])
    metrics.set_meter_provider(provider)
    ProcessInstrumentor().instrument()
    print(f"ready {os.getpid()}", flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = time.monotonic() + float(os.environ.get("E2E_SECONDS", "120"))
    beat = 0
    busy_until = time.monotonic() + busy_s
    oom_at = time.monotonic() + 2 if oom_mb else None
    while not stop.is_set() and time.monotonic() < deadline:
        if oom_at is not None and time.monotonic() >= oom_at:
            oom_at = None
            ended = subprocess.run([sys.executable, "-c", GRANDCHILD, str(oom_mb)], check=False)
            print(f"oom {ended.returncode}", flush=True)
        if time.monotonic() < busy_until:
            spin(0.1)
        if work:
            garbage = [str(i) * 10 for i in range(20_000)]  # short-lived, freed each beat
            del garbage
        stop.wait(0.05)
        beat += 1
        print(f"beat {beat}", flush=True)
    provider.shutdown()
    print(f"done {len(ballast)}", flush=True)


if __name__ == "__main__":
    main()
