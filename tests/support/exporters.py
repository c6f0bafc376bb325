"""A metric exporter for the tests: it counts exports by pid, and can stall or fail them."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult


class Exporter(MetricExporter):
    """Exports nothing anywhere: each export calls ``before``, then returns ``result``.

    ``exports`` holds the pid of the process that made each export.
    """

    def __init__(
        self,
        before: Callable[[], object] = lambda: None,
        result: MetricExportResult = MetricExportResult.SUCCESS,
    ) -> None:
        super().__init__()
        self.exports: list[int] = []
        self._before = before
        self._result = result

    def export(self, *_args: Any, **_kwargs: Any) -> MetricExportResult:
        self._before()
        self.exports.append(os.getpid())
        return self._result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, *_args: Any, **_kwargs: Any) -> None:
        pass
