"""Loaded by every Python that ``scripts/compat.py`` starts, through ``PYTHONPATH``.

As ``opentelemetry-instrument`` does, it sets up a global ``MeterProvider`` before
the program runs. ``PROCESS_COMPAT_MODE`` says what else it loads:

* ``sdk``: the SDK alone, a periodic reader every ``PROCESS_COMPAT_INTERVAL_MS``;
* ``package``: the same, then ``ProcessInstrumentor().instrument()`` with every option on
  (:func:`every_option_on`, derived from the options' declarations), or only those
  that ``PROCESS_COMPAT_OPTIONS`` names (comma-separated).

Whatever the SDK or the package logs at WARNING or above, and any error of this
hook itself, goes as JSON lines to ``PROCESS_COMPAT_LOG_DIR/<pid>.jsonl``, never
to the program's stderr: the harness fails on what the package logs. Each process
also writes one ``start`` line there, so that the harness can count them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from typing import Any

MODE = os.environ.get("PROCESS_COMPAT_MODE", "")
LOG_DIR = os.environ.get("PROCESS_COMPAT_LOG_DIR", "")
INTERVAL_MS = int(os.environ.get("PROCESS_COMPAT_INTERVAL_MS") or 200)
ONLY = [n for n in os.environ.get("PROCESS_COMPAT_OPTIONS", "").split(",") if n]
"""To find which option a failure needs: only these are turned on (default: all)."""
OTHER_CHOICES = os.environ.get("PROCESS_COMPAT_CHOICES") == "other"
"""Each choice at its value that is not the default, instead of its default."""
WATCHED_LOGGER = "opentelemetry"  # the SDK's, the instrumentation's and the package's loggers


def record(kind: str, logger: str, level: str, message: str, detail: str = "") -> None:
    """Append one JSON line to this process's file in LOG_DIR; never raises.

    One open per line: forked children, and tests that close every descriptor,
    keep no descriptor of ours.
    """
    if not LOG_DIR:
        return
    line = {"pid": os.getpid(), "kind": kind, "logger": logger, "level": level}
    line.update(message=message, detail=detail[-4000:])
    path = os.path.join(LOG_DIR, f"{os.getpid()}.jsonl")
    try:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(path, flags, 0o600)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)
    except Exception:  # noqa: BLE001 - the hook must not change the program
        pass


class ToLogDir(logging.Handler):
    """A logging handler that writes each record with :func:`record`."""

    def emit(self, rec: logging.LogRecord) -> None:
        detail = "".join(traceback.format_exception(*rec.exc_info)) if rec.exc_info else ""
        record("log", rec.name, rec.levelname, rec.getMessage(), detail)


def every_option_on(other_choices: bool = False) -> dict[str, Any]:
    """The keywords of ``instrument()`` that turn every option on, from their declarations.

    A switch (``bool`` or ``auto``) is ``True``; ``include`` names every metric it
    accepts (neither on by default nor turned on by an option); a choice keeps its
    default, or with ``other_choices`` takes its other value (a choice picks one
    path of two: each run covers one); ``exclude``, the caps and the attributes
    keep their defaults. An option of a form not listed here stops the run.
    """
    from opentelemetry.instrumentation.process.metrics import METRICS
    from opentelemetry.instrumentation.process.options import (
        OPTION_NAMES,
        ProcessMetricsOptions,
        declared,
    )

    defaults = ProcessMetricsOptions()
    on: dict[str, Any] = {}
    for name in OPTION_NAMES:
        form = declared(name).form
        if form.kind in ("bool", "tristate"):
            on[name] = True
        elif form.kind == "choice":
            default = getattr(defaults, name)
            on[name] = next(v for v in form.values if v != default) if other_choices else default
        elif name == "include":
            on[name] = [m.name for m in METRICS if not m.default and m.option is None]
        elif name == "exclude" or form.kind in ("int", "attributes"):
            continue
        else:
            raise RuntimeError(f"compat: no 'on' value for option {name} ({form.kind!r})")
    return on


def _discarding_exporter() -> Any:
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    class Discard(MetricExporter):
        """Walks every point, as an exporter would, and keeps none."""

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **_: Any) -> Any:
            for resource in metrics_data.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        for _point in metric.data.data_points:
                            pass
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **_: Any) -> None:
            pass

    return Discard()


def start(mode: str) -> None:
    """The global MeterProvider, and in ``package`` mode the package, every option on."""
    watched = logging.getLogger(WATCHED_LOGGER)
    watched.addHandler(ToLogDir(logging.WARNING))
    record("start", "", "", f"{mode} {sys.version.split()[0]} {sys.argv[:3]}")

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    from opentelemetry import metrics

    reader = PeriodicExportingMetricReader(
        _discarding_exporter(), export_interval_millis=INTERVAL_MS
    )
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    if mode == "package":
        from opentelemetry.instrumentation.process import ProcessInstrumentor

        on = every_option_on(OTHER_CHOICES)
        ProcessInstrumentor().instrument(**{k: v for k, v in on.items() if k in (ONLY or on)})


if MODE:
    try:
        start(MODE)
    except Exception as exc:  # noqa: BLE001 - reported to the harness, not to the program
        record("hook", __name__, "ERROR", f"{type(exc).__name__}: {exc}", traceback.format_exc())
