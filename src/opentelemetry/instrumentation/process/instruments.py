"""The OpenTelemetry side: observable instruments driven by the metric table.

Each enabled row becomes one observable instrument whose callback reads the
shared snapshot. Nothing here knows about /proc or psutil.

The SDK cannot unregister an instrument, so instruments live for the meter
provider's lifetime and their callbacks are pointed at a live configuration,
or at nothing after ``uninstrument()``. A later ``instrument()`` re-points the
same instruments: no duplicates, no duplicate-instrument warnings.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import (
    CallbackOptions,
    Histogram,
    Meter,
    MeterProvider,
    Observation,
    get_meter,
    get_meter_provider,
)

from opentelemetry import context as otel_context

from . import catalog, interpreter, sdk_fork_guard, service
from .catalog import supported
from .metrics import Kind, Metric
from .options import SHARED_ONCE, ProcessMetricsOptions
from .selection import enabled_metrics
from .snapshot import Snapshot, SnapshotCache
from .sources import Key
from .sources.base import Sample
from .version import __version__

if TYPE_CHECKING:
    from .group.keys import Group

_logger = logging.getLogger(__name__)

SCOPE_NAME = "opentelemetry.instrumentation.process"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"

STALL_BOUNDS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Bucket bounds (seconds) advised for the stall histograms, whose events are 100 ms or more."""

SERIES_WARNING_THRESHOLD = 2000
"""Distinct attribute sets of one metric past which a warning explains the SDK's limit.

It is the SDK's default cardinality limit per metric. The SDK keeps every
attribute set an observable instrument has reported, not just the current ones
(whatever the temporality), and folds new ones into an overflow point past
its limit, which a View or the reader may set to another value.
"""


class Instrumentation:
    """One ``instrument()``: the options in force and their snapshot cache.

    ``service`` is the identity of the service the provider exports
    (:func:`.service.identity`): the group whose shared metrics one process reports.
    """

    def __init__(self, options: ProcessMetricsOptions, service: str = "") -> None:
        self.options = options
        self.provider: weakref.ref[Any] | None = None
        metrics = enabled_metrics(options)
        # Supervisor mode: the process metrics readable from outside get per-child rows.
        per_child = (catalog.PER_CHILD.get(m.name) for m in metrics) if options.children else ()
        self._children = {c.name: c for c in per_child if c is not None and supported(c)}
        sources = {m.source for m in (*metrics, *self._children.values())}
        self.cache = SnapshotCache(options, sources, service)
        # A source with nothing to read here (no cgroup limit, say) gets no instruments.
        self.metrics = tuple(m for m in metrics if m.source not in self.cache.idle)
        self._attributes = dict(options.attributes)
        # Attribute dicts of the last collection, by metric and key: the same
        # sets mostly come back, so each is built once. Only current keys are
        # kept, so exited threads do not pile up here.
        self._attribute_sets: dict[str, dict[Key, dict[str, Any]]] = {}
        self._child_sets: dict[str, dict[Key, dict[str, Any]]] = {}
        # (metric, hash) of the attribute sets reported so far, and their number per
        # metric, until the SDK's cardinality limit is passed (then a warning, and no
        # more counting). One set for all metrics: a set is always walked by the
        # collector, a tuple of a str and an int is not.
        self._series_seen: set[tuple[str, int]] = set()
        self._series_counts: dict[str, int] = {}
        self._series_warned: set[str] = set()
        self.histograms: dict[Metric, Histogram] = {}
        """The synchronous instruments of the event fields (stalls), set by :func:`start`."""
        self._recorded = 0
        """The generation of the last snapshot whose events were recorded."""
        self._recording = threading.Lock()

    def record(self, snap: Snapshot) -> None:
        """Record the events of ``snap`` into the histograms, once per snapshot.

        At a collection, so never from a gc callback: the SDK's aggregation
        lock may be held by this thread when a collection starts
        (probes/gc_pauses.py). Each event carries the context it ran under:
        with a sampled span there, the SDK keeps it as the point's exemplar.
        """
        if snap.generation == self._recorded or not self.histograms:
            return
        with self._recording:
            if snap.generation == self._recorded:
                return
            self._recorded = snap.generation
        for metric, histogram in self.histograms.items():
            reading = snap.readings.get(metric.source)
            events: Any = None if reading is None else reading.get(metric.field)
            for event in events or ():
                histogram.record(
                    event.value,
                    self._event_attributes(event),
                    context=_span_context(event.captured),
                )

    def _event_attributes(self, event: Sample) -> dict[str, Any]:
        named = zip(event.key.names, event.key, strict=True)
        return {**self._attributes, **{n: a for n, a in named if a is not None}}

    def observe(self, metric: Metric, snap: Snapshot) -> list[Observation]:
        """The points of ``metric`` in ``snap``, then its children's; none if a source failed.

        A histogram's are its events, one each (the snapshot command prints them;
        the instrument records them: :meth:`record`).
        """
        points = self._observe(metric, snap, self._attribute_sets)
        child = self._children.get(metric.name)
        if child is not None:
            points += self._observe(child, snap, self._child_sets)
        return points

    def _observe(
        self, metric: Metric, snap: Snapshot, cache: dict[str, dict[Key, dict[str, Any]]]
    ) -> list[Observation]:
        reading = snap.readings.get(metric.source)
        value = None if reading is None else reading.get(metric.field)
        if value is None:
            return []
        cast = metric.value_type
        # A number first: checked against the Mapping ABC, int and float would join the
        # negative caches of every mapping class, objects that every full collection walks.
        if isinstance(value, (int, float)):
            return [Observation(cast(value), self._attributes)]
        if isinstance(value, tuple):  # events (a histogram's): one point each
            return [Observation(cast(e.value), self._event_attributes(e)) for e in value]
        sets = cache.get(metric.name)
        if sets is None or sets.keys() != value.keys():
            sets = cache[metric.name] = self._renew(metric, value, sets or {})
        return [Observation(cast(v), sets[key]) for key, v in value.items()]

    def _renew(
        self, metric: Metric, value: Mapping[Key, Any], last: Mapping[Key, dict[str, Any]]
    ) -> dict[Key, dict[str, Any]]:
        """Attribute dicts for the keys of ``value``: kept from ``last``, or new."""
        current: dict[Key, dict[str, Any]] = {}
        for key in value:
            attributes = last.get(key)
            if attributes is None:
                # A key names its own values (sources.base.attributes).
                named = zip(key.names, key, strict=True)
                attributes = {**self._attributes, **{n: a for n, a in named if a is not None}}
                self._count_series(metric.name, key)
            current[key] = attributes
        return current

    def _count_series(self, name: str, key: Key) -> None:
        if name in self._series_warned:
            return
        seen = (name, hash(key))
        if seen in self._series_seen:
            return
        self._series_seen.add(seen)
        count = self._series_counts[name] = self._series_counts.get(name, 0) + 1
        if count > SERIES_WARNING_THRESHOLD:
            self._series_warned.add(name)
            self._series_seen = {s for s in self._series_seen if s[0] != name}
            _logger.warning(
                "process metrics: %s has reported more than %d distinct attribute sets "
                "since instrument() (threads, devices or CPUs that came and went). The "
                "OpenTelemetry SDK keeps every set an observable instrument has reported "
                "and, past its cardinality limit (%d per metric unless a View or the "
                "reader sets another), folds new ones into one otel.metric.overflow=true "
                "point. Raise that limit (each set costs the SDK about 1.4 KB) or exclude "
                "the metric. This is logged once.",
                name,
                SERIES_WARNING_THRESHOLD,
                SERIES_WARNING_THRESHOLD,
            )


class _Observer:
    """The callback of one instrument; ``live`` is ``None`` while uninstrumented."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric
        self.live: Instrumentation | None = None
        self._seen = 0

    def __call__(self, _options: CallbackOptions) -> Iterable[Observation]:
        live = self.live
        if live is None:
            return []
        try:
            snap = live.cache.snapshot(self._seen)
            self._seen = snap.generation
            live.record(snap)
            return live.observe(self.metric, snap)
        except Exception as exc:  # noqa: BLE001 - a callback never raises into the SDK
            live.cache.faults.warning(
                (self.metric.name, type(exc).__name__),
                "process metrics: the callback of %s failed; its points are left out. "
                "This fault is logged at most once per %.0f s.",
                self.metric.name,
                live.cache.faults.period,
                exc_info=True,
            )
            return []


class _Registry:
    """The instruments this package created on one meter provider."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.observers: dict[str, _Observer] = {}
        self.histograms: dict[str, Histogram] = {}

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

    def histogram(self, metric: Metric) -> Histogram:
        found = self.histograms.get(metric.name)
        if found is None:
            found = self.histograms[metric.name] = _histogram(self.meter, metric)
        return found


def _histogram(meter: Meter, metric: Metric) -> Histogram:
    """A histogram with the stall buckets, where this API can advise them (1.29 and later)."""
    kwargs: dict[str, Any] = {"unit": metric.unit, "description": metric.description}
    if (
        "explicit_bucket_boundaries_advisory"
        in inspect.signature(meter.create_histogram).parameters
    ):
        kwargs["explicit_bucket_boundaries_advisory"] = STALL_BOUNDS
    return meter.create_histogram(metric.name, **kwargs)


def _span_context(captured: Any) -> Any:
    """The OpenTelemetry context current in ``captured`` (a ``contextvars.Context``), or ``None``.

    Read in a copy: the original may be entered by its thread right now, and
    a context can be entered once at a time.
    """
    if not isinstance(captured, contextvars.Context):
        return None
    return captured.copy().run(otel_context.get_current)


_registries: weakref.WeakKeyDictionary[Any, _Registry] = weakref.WeakKeyDictionary()


def start(options: ProcessMetricsOptions, meter_provider: MeterProvider | None) -> Instrumentation:
    """Point this provider's instruments at a new :class:`Instrumentation` for ``options``."""
    provider = meter_provider if meter_provider is not None else get_meter_provider()
    registry = _registries.get(provider)
    if registry is None:
        meter = get_meter(SCOPE_NAME, __version__, provider, schema_url=SCHEMA_URL)
        registry = _registries[provider] = _Registry(meter)
    # Only a group needs the service's identity (``"once"``): with ``"every"`` the group
    # code is never imported.
    identity = service.identity(provider) if options.shared_metrics == SHARED_ONCE else ""
    live = Instrumentation(options, identity)
    for metric in live.metrics:
        if metric.kind is Kind.HISTOGRAM:
            live.histograms[metric] = registry.histogram(metric)
        else:
            registry.observer(metric).live = live
    live.provider = weakref.ref(provider)
    live.cache.on_fork = _after_fork(live.provider)
    sdk_fork_guard.guard(provider)
    _logger.debug("process metrics: reporting %d metrics", len(live.metrics))
    return live


def _after_fork(provider: weakref.ref[Any]) -> Callable[[bool], None]:
    def repair(hooked: bool) -> None:
        found = provider()
        if found is not None:
            sdk_fork_guard.after_fork(found, hooked)

    return repair


def stop(live: Instrumentation) -> None:
    """Stop every point of ``live``: its callbacks return nothing from now on."""
    for registry in list(_registries.values()):
        for observer in registry.observers.values():
            if observer.live is live:
                observer.live = None
    live.cache.close()
    provider = live.provider() if live.provider is not None else None
    if provider is not None:
        sdk_fork_guard.unguard(provider)


class ProcessMetrics:
    """This process's metrics on one meter provider, from construction until :meth:`close`.

    The building block of :class:`ProcessInstrumentor`, for when the
    instrumentor's one-per-process model does not fit (tests, benchmarks,
    several providers). ``options`` default to ``ProcessMetricsOptions()``;
    the environment is not read. A second one on the same provider takes over
    its instruments from the first.
    """

    def __init__(
        self,
        options: ProcessMetricsOptions | None = None,
        *,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self._options = options or ProcessMetricsOptions()
        self._live: Instrumentation | None = None
        if not interpreter.is_main():
            interpreter.log_not_main()
            return
        self._live = start(self._options, meter_provider)

    @property
    def options(self) -> ProcessMetricsOptions:
        """The options in force."""
        return self._options

    @property
    def group(self) -> Group | None:
        """The group of processes that elect one reporter of the shared metrics with this one.

        Its ``service`` (the provider's ``service.namespace``, ``service.name``
        and ``deployment.environment.name``), ``user``, ``cgroup`` and ``key``
        (the lock file's name). ``None`` with ``shared_metrics="every"``, where
        no group could be worked out (every process then reports), or after
        :meth:`close`.
        """
        return self._live.cache.group if self._live is not None else None

    def close(self) -> None:
        """Stop every point and every hook; idempotent."""
        if self._live is not None:
            stop(self._live)
            self._live = None

    def __enter__(self) -> ProcessMetrics:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
