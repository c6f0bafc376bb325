"""A data point's value, whatever its kind."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics.export import HistogramDataPoint


def value_of(point: Any) -> Any:
    """A number point's value; a histogram point's count of events.

    The stall histograms get a point whenever a pause passes their threshold,
    which a loaded machine can make happen in any collection.
    """
    return point.count if isinstance(point, HistogramDataPoint) else point.value
