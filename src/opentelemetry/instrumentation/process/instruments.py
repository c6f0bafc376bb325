"""The OpenTelemetry side: observable instruments driven by the metric table.

Each enabled row becomes one observable instrument whose callback reads the
shared snapshot. Nothing here knows about /proc or psutil.

The SDK cannot unregister an instrument, so instruments live for the meter
provider's lifetime and their callbacks are pointed at a live configuration,
or at nothing after ``uninstrument()``. A later ``instrument()`` re-points the
same instruments: no duplicates, no duplicate-instrument warnings.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.metrics import (
    CallbackOptions,
    Meter,
    MeterProvider,
    Observation,
    get_meter,
    get_meter_provider,
)

from .metrics import Kind, Metric
from .options import ProcessMetricsOptions
from .snapshot import Snapshot, SnapshotCache
from .sources import Key
from .version import __version__

_logger = logging.getLogger("opentelemetry.instrumentation.process")

SCOPE_NAME = "opentelemetry.instrumentation.process"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
_MAX_ATTRIBUTE_SETS = 4096


class Live:
    """One ``instrument()``: the options in force and their snapshot cache."""

    def __init__(self, options: ProcessMetricsOptions) -> None:
        self.options = options
        self.metrics = options.metrics()
        self.cache = SnapshotCache(
            {m.source for m in self.metrics},
            per_cpu=options.per_cpu,
            max_threads=options.max_thread_series // 2,
            cpu_frequency=options.cpu_frequency,
        )
        self._attributes = dict(options.attributes)
        # Attribute dicts by (metric, key): the same few sets come back every
        # collection, so each is built once. Cleared if thread churn grows it.
        self._attribute_sets: dict[tuple[str, Key], dict[str, Any]] = {}

    def observe(self, metric: Metric, snap: Snapshot) -> list[Observation]:
        """The points of ``metric`` in ``snap``; none if its source failed."""
        reading = snap.readings.get(metric.source)
        value = None if reading is None else reading.get(metric.field)
        if value is None:
            return []
        cast = metric.value_type
        if not isinstance(value, Mapping):
            return [Observation(cast(value), self._attributes)]
        sets = self._attribute_sets
        if len(sets) > _MAX_ATTRIBUTE_SETS:
            sets.clear()
        points = []
        for key, v in value.items():
            attributes = sets.get((metric.name, key))
            if attributes is None:
                named = zip(metric.attributes, key, strict=False)
                attributes = {**self._attributes, **{n: a for n, a in named if a is not None}}
                sets[(metric.name, key)] = attributes
            points.append(Observation(cast(v), attributes))
        return points


class _Observer:
    """The callback of one instrument; ``live`` is ``None`` while uninstrumented."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric
        self.live: Live | None = None
        self._seen = 0
        self._failed = False

    def __call__(self, _options: CallbackOptions) -> Iterable[Observation]:
        live = self.live
        if live is None:
            return []
        try:
            snap = live.cache.snapshot(self._seen)
            self._seen = snap.generation
            return live.observe(self.metric, snap)
        except Exception:
            if not self._failed:
                self._failed = True
                _logger.warning(
                    "process metrics: callback of %s failed; its points are left out. "
                    "This is logged once.",
                    self.metric.name,
                    exc_info=True,
                )
            return []


class _Registry:
    """The instruments this package created on one meter provider."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.observers: dict[str, _Observer] = {}

    def observer(self, metric: Metric) -> _Observer:
        found = self.observers.get(metric.name)
        if found is not None:
            return found
        observer = _Observer(metric)
        create: Any = {
            Kind.COUNTER: self.meter.create_observable_counter,
            Kind.UP_DOWN_COUNTER: self.meter.create_observable_up_down_counter,
            Kind.GAUGE: self.meter.create_observable_gauge,
        }[metric.kind]
        create(metric.name, callbacks=[observer], unit=metric.unit, description=metric.description)
        self.observers[metric.name] = observer
        return observer


_registries: weakref.WeakKeyDictionary[Any, _Registry] = weakref.WeakKeyDictionary()


def start(options: ProcessMetricsOptions, meter_provider: MeterProvider | None) -> Live:
    """Point this provider's instruments at a new :class:`Live` for ``options``."""
    provider = meter_provider if meter_provider is not None else get_meter_provider()
    registry = _registries.get(provider)
    if registry is None:
        meter = get_meter(SCOPE_NAME, __version__, provider, schema_url=SCHEMA_URL)
        registry = _registries[provider] = _Registry(meter)
    live = Live(options)
    for metric in live.metrics:
        registry.observer(metric).live = live
    _logger.debug("process metrics: reporting %d metrics", len(live.metrics))
    return live


def stop(live: Live) -> None:
    """Stop every point of ``live``: its callbacks return nothing from now on."""
    for registry in list(_registries.values()):
        for observer in registry.observers.values():
            if observer.live is live:
                observer.live = None
