"""What the semantic conventions installed say of a metric: its kind, unit and attribute values.

:func:`check_shape` holds one reported metric against its table row and, when
the installed conventions are the ones the table follows, against them.
"""

from __future__ import annotations

import enum
import functools
import importlib
import inspect
import pkgutil
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import Gauge, Histogram, Sum

from opentelemetry.instrumentation.process.catalog import attributes_of
from opentelemetry.instrumentation.process.instruments import SCHEMA_URL
from opentelemetry.instrumentation.process.metrics import Kind, Metric

from ..conftest import points

_SEMCONV_KINDS = {
    "create_counter": Kind.COUNTER,
    "create_observable_counter": Kind.COUNTER,
    "create_up_down_counter": Kind.UP_DOWN_COUNTER,
    "create_observable_up_down_counter": Kind.UP_DOWN_COUNTER,
    "create_gauge": Kind.GAUGE,
    "create_observable_gauge": Kind.GAUGE,
}


class _RecordingMeter:
    """Stands in for a Meter: records which create_* call each semconv helper makes."""

    def __init__(self) -> None:
        self.shapes: dict[str, tuple[Kind, str]] = {}

    def __getattr__(self, method: str) -> Callable[..., None]:
        def create(name: str, *_args: Any, unit: str = "", **_kwargs: Any) -> None:
            if method in _SEMCONV_KINDS:  # histograms are not observable: none of ours
                self.shapes[name] = (_SEMCONV_KINDS[method], unit)

        return create


@functools.cache
def semconv_shapes() -> dict[str, tuple[Kind, str]]:
    """Instrument kind and unit of every metric of the installed semantic conventions.

    Taken from the ``create_*`` helpers of ``opentelemetry-semantic-conventions``
    (stable and incubating), by calling each one with a recording meter: the
    kind is the meter method it calls, the unit the one it passes.
    """
    import opentelemetry.semconv._incubating.metrics as incubating
    import opentelemetry.semconv.metrics as stable

    meter = _RecordingMeter()
    for package in (incubating, stable):  # stable last: it wins
        for module in pkgutil.iter_modules(package.__path__):
            found = importlib.import_module(f"{package.__name__}.{module.name}")
            for name, helper in vars(found).items():
                if name.startswith("create_") and callable(helper):
                    arity = len(inspect.signature(helper).parameters)
                    helper(meter, *[None] * (arity - 1))  # (meter[, callbacks])
    return meter.shapes


@functools.cache
def semconv_attributes() -> dict[str, set[Any] | None]:
    """Every attribute of the installed semantic conventions, with its enumerated values.

    ``None`` where the conventions list no values. An enum ``XyzValues`` goes
    with the module's string constant of the same name (``XYZ``).
    """
    import opentelemetry.semconv._incubating.attributes as incubating
    import opentelemetry.semconv.attributes as stable

    found: dict[str, set[Any] | None] = {}
    for package in (incubating, stable):
        for module in pkgutil.iter_modules(package.__path__):
            mod = importlib.import_module(f"{package.__name__}.{module.name}")
            constants = {
                k.replace("_", ""): v
                for k, v in vars(mod).items()
                if k.isupper() and isinstance(v, str)
            }
            for name in constants.values():
                found.setdefault(name, None)
            for k, v in vars(mod).items():
                if isinstance(v, type) and issubclass(v, enum.Enum) and k.endswith("Values"):
                    attribute = constants.get(k[: -len("Values")].upper())
                    if attribute is not None:
                        found[attribute] = {member.value for member in v}
    return found


# Enumerations whose listed values are only the well-known ones: others are allowed.
OPEN_ENUMS = {"system.filesystem.type"}


def semconv_is_current() -> bool:
    """Whether the installed conventions package knows this package's schema (1.44)."""
    from opentelemetry.semconv.schemas import Schemas

    return SCHEMA_URL in {s.value for s in Schemas}


needs_current_semconv = pytest.mark.skipif(
    not semconv_is_current(),
    reason="the installed opentelemetry-semantic-conventions predates this package's schema",
)


def check_shape(metric: Metric, reported: Any) -> None:
    assert reported.unit == metric.unit
    assert reported.description == metric.description
    kind = metric.kind
    current = semconv_is_current()
    if not metric.extension and current:
        kind, unit = semconv_shapes()[metric.name]
        assert reported.unit == unit, metric.name
    data = reported.data
    if kind is Kind.HISTOGRAM:
        assert isinstance(data, Histogram)
        assert data.data_points, f"{metric.name} has no points"
        for point in data.data_points:
            assert set(point.attributes or {}) <= set(attributes_of(metric)), metric.name
            assert point.count > 0 and point.sum >= point.min * point.count, metric.name
        return
    if kind is Kind.GAUGE:
        assert isinstance(data, Gauge)
    else:
        assert isinstance(data, Sum)
        assert data.is_monotonic is (kind is Kind.COUNTER)
    assert data.data_points, f"{metric.name} has no points"
    values = semconv_attributes() if current else {}
    for attrs, v in points(reported).items():
        assert {k for k, _ in attrs} <= set(attributes_of(metric)), (metric.name, attrs)
        assert isinstance(v, metric.value_type), (metric.name, v)
        for key, attribute in attrs:
            allowed = values.get(key) if key not in OPEN_ENUMS else None
            assert allowed is None or attribute in allowed, (metric.name, key, attribute)
