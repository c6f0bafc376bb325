"""The Prometheus names that the metric reference prints are the ones a real backend makes."""

from __future__ import annotations

import re
import subprocess
import sys
from types import ModuleType

import pytest

from opentelemetry.instrumentation.process.catalog import supported
from opentelemetry.instrumentation.process.metrics import METRICS

from ..conftest import events_metrics
from ..support.loading import load_file
from .launch import unique_name
from .servers import REPO, VictoriaMetrics, child_env

pytestmark = pytest.mark.e2e

_HISTOGRAM_SERIES = re.compile(r"_(bucket|sum|count)$")

PUSH_EVERYTHING = """
import sys
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.instrumentation.process import ProcessInstrumentor

exporter = OTLPMetricExporter(endpoint=sys.argv[1])
provider = MeterProvider(metric_readers=[PeriodicExportingMetricReader(exporter, 60000)])
ProcessInstrumentor().instrument(
    meter_provider=provider, cpu_frequency=True, per_thread=True,
    include=["*", "system.network.connection.count"],
)
provider.shutdown()
"""


def _process_docs() -> ModuleType:
    path = REPO / "docs" / "_ext" / "process_docs.py"
    return load_file(path, "docs_process_docs")


def test_reference_predicts_the_backend_names(vm_prom: VictoriaMetrics) -> None:
    pytest.importorskip("sphinx", reason="the docs extra is not installed")
    service = unique_name("docs-names")
    done = subprocess.run(
        [sys.executable, "-c", PUSH_EVERYTHING, vm_prom.otlp_url],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(OTEL_SERVICE_NAME=service),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # A histogram arrives as the series of its buckets, sum and count.
    predicted = {_process_docs().prometheus_name(m) for m in METRICS}
    names = set()
    for name in vm_prom.names(f'{{service_name="{service}"}}'):
        base = _HISTOGRAM_SERIES.sub("", name)
        names.add(base if base in predicted and name not in predicted else name)
    assert names, "nothing arrived"
    assert names <= predicted, f"names the reference does not predict: {names - predicted}"
    for metric in METRICS:
        # A histogram of stalls has points once a stall happened (test_exemplars_e2e.py).
        if metric.default and supported(metric) and metric.name not in events_metrics():
            assert _process_docs().prometheus_name(metric) in names, metric.name
