"""Process metrics for OpenTelemetry, from one shared psutil snapshot per collection.

Usage::

    from opentelemetry.instrumentation.process import ProcessInstrumentor

    ProcessInstrumentor().instrument()                     # defaults
    ProcessInstrumentor().instrument(cpu_frequency=True)   # opt in to frequency

Every option can also come from an ``OTEL_PYTHON_PROCESS_METRICS_*``
environment variable; see :class:`ProcessMetricsOptions`. The names exported
here are the public API; every module is internal.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from .package import _instruments
from .version import __version__

if TYPE_CHECKING:
    from .instruments import SCOPE_NAME, ProcessMetrics
    from .options import ProcessMetricsOptions
    from .probes.loops.monitor import watch_loop
    from .probes.reaps import gunicorn_child_exit

# Imported when first used (instrument() uses them): importing the package
# alone, as the auto-instrumentation's entry point does, costs little.
_LAZY = {
    "SCOPE_NAME": "instruments",
    "ProcessMetrics": "instruments",
    "ProcessMetricsOptions": "options",
    "watch_loop": "probes.loops.monitor",
    "gunicorn_child_exit": "probes.reaps",
}

__all__ = [
    "SCOPE_NAME",
    "ProcessInstrumentor",
    "ProcessMetrics",
    "ProcessMetricsOptions",
    "__version__",
    "gunicorn_child_exit",
    "watch_loop",
]

# Generic keyword arguments that callers pass to every instrumentor.
_IGNORED_KWARGS = ("tracer_provider", "logger_provider", "event_logger_provider")
# What BaseInstrumentor.instrument() itself takes.
_BASE_KWARGS = ("skip_dep_check", "raise_exception_on_conflict")

_logger = logging.getLogger(__name__)


class ProcessInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Reports this process's metrics, and a few cheap host metrics.

    ``instrument(meter_provider=None, **options)`` takes the fields of
    :class:`ProcessMetricsOptions` as keywords, or a whole one as
    ``options=``. Bad options raise ``ValueError``. ``uninstrument()`` stops
    every point; ``instrument()`` again resumes, with the new options.
    """

    _metrics: ProcessMetrics | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def instrument(self, **kwargs: Any) -> Any:
        """Start reporting; a no-op while instrumented, with a warning naming what it ignored."""
        asked = [k for k in kwargs if k not in _IGNORED_KWARGS + _BASE_KWARGS]
        if self._is_instrumented_by_opentelemetry and asked:
            from .excerpt import excerpt

            # BaseInstrumentor returns before _instrument(): these would vanish in silence.
            _logger.warning(
                "instrument(%s) ignored: already instrumented, the options in force stay. "
                "To apply them, call uninstrument() first, then instrument() with them.",
                ", ".join(f"{k}={excerpt(kwargs[k], 60)}" for k in asked)[:400],
            )
        return super().instrument(**kwargs)

    def _instrument(self, **kwargs: Any) -> None:
        from . import interpreter

        if not interpreter.is_main():
            interpreter.log_not_main()
            return
        from .environment import resolve
        from .instruments import ProcessMetrics

        meter_provider = kwargs.pop("meter_provider", None)
        for name in _IGNORED_KWARGS:
            kwargs.pop(name, None)
        options = resolve(kwargs)
        self._metrics = ProcessMetrics(options, meter_provider=meter_provider)

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None

    @property
    def options(self) -> ProcessMetricsOptions | None:
        """The options in force, or ``None`` while not instrumented."""
        return self._metrics.options if self._metrics is not None else None


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
