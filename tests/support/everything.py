"""Every option on, and a ``sitecustomize.py`` that instruments every process with it.

"Every option" is derived from the declarations: each boolean option true
(auto ones too), and every metric that ``include`` may name. A process that
imports the ``sitecustomize`` written here instruments itself as
``opentelemetry-instrument`` would, at start-up, with a periodic reader.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from opentelemetry.instrumentation.process.metrics import METRICS
from opentelemetry.instrumentation.process.options import (
    BOOLEAN,
    BOOLEAN_OR_AUTO,
    OPTION_NAMES,
    declared,
)


def every_option() -> dict[str, Any]:
    """Keyword arguments of ``instrument()`` that turn on everything it can report."""
    on: dict[str, Any] = {
        name: True for name in OPTION_NAMES if declared(name).form in (BOOLEAN, BOOLEAN_OR_AUTO)
    }
    on["include"] = [m.name for m in METRICS if m.option is None]
    return on


SITECUSTOMIZE = """\
import json, logging, os, sys
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter, MetricExportResult, PeriodicExportingMetricReader,
)

class Nowhere(MetricExporter):
    def export(self, metrics_data, timeout_millis=10_000, **kwargs):
        return MetricExportResult.SUCCESS
    def force_flush(self, timeout_millis=10_000):
        return True
    def shutdown(self, timeout_millis=30_000, **kwargs):
        pass

logging.getLogger("opentelemetry.instrumentation.process").setLevel(logging.INFO)
log = os.environ.get("TEST_SITE_LOG")
if log:
    handler = logging.FileHandler(log, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logging.getLogger("opentelemetry.instrumentation.process").addHandler(handler)
interval = int(os.environ.get("TEST_SITE_INTERVAL", "200"))
# The reader's export thread starts in its constructor, and its first tick logs an
# SDK warning if the provider has not registered it yet: the provider's resource
# detection, slow on a loaded machine, is done first.
from opentelemetry.sdk.resources import Resource
resource = Resource.create({})
reader = PeriodicExportingMetricReader(Nowhere(), export_interval_millis=interval)
metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
options = os.environ.get("TEST_SITE_OPTIONS")
if options is not None:
    from opentelemetry.instrumentation.process import ProcessInstrumentor
    ProcessInstrumentor().instrument(**json.loads(options))
"""


def site(folder: Path, options: dict[str, Any] | None) -> dict[str, str]:
    """The environment of a Python that loads the SDK, and the package with ``options``, at start.

    ``options`` ``None``: the SDK alone, with the same reader. What the
    package logs (INFO and up) goes to ``folder / "package.log"``.
    """
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    paths = [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    env["TEST_SITE_LOG"] = str(folder / "package.log")
    env.pop("TEST_SITE_OPTIONS", None)
    if options is not None:
        env["TEST_SITE_OPTIONS"] = json.dumps(options)
    return env
