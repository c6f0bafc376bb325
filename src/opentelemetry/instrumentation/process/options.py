"""Options of the instrumentor: one frozen dataclass, validated in one place.

Precedence, for each option: an explicit argument, then its environment
variable, then the default. A bad argument raises ``ValueError``; a bad
environment variable logs one warning and falls back to the default, so that
auto-instrumentation never crashes the host application.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .metrics import METRICS, METRICS_BY_NAME, Metric

_logger = logging.getLogger("opentelemetry.instrumentation.process")

DEFAULT_MAX_THREAD_SERIES = 200
"""100 threads, each with a ``user`` and a ``system`` series."""

ENV_PREFIX = "OTEL_PYTHON_PROCESS_METRICS_"
ENV_VARS: Mapping[str, str] = {
    "cpu_frequency": ENV_PREFIX + "CPU_FREQUENCY",
    "per_thread": ENV_PREFIX + "PER_THREAD",
    "per_cpu": ENV_PREFIX + "PER_CPU",
    "include": ENV_PREFIX + "INCLUDE",
    "exclude": ENV_PREFIX + "EXCLUDE",
    "max_thread_series": ENV_PREFIX + "MAX_THREAD_SERIES",
}

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}
_ATTRIBUTE_TYPES = (str, bool, int, float)  # bool before int: see _kind
_ATTRIBUTES_ALLOWED = (
    "a mapping of str to str, bool, int (64-bit), float or a sequence of one of those"
)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class ProcessMetricsOptions:
    """What to report. Every field is checked when the object is built.

    Raises ``ValueError`` naming the option, the value given and what is
    allowed.
    """

    cpu_frequency: bool = False
    """Register ``system.cpu.frequency`` and the min/max extensions (costs reads per CPU)."""
    per_thread: bool = False
    """Report ``process_metrics.thread.cpu.time`` per thread."""
    per_cpu: bool = False
    """Break ``system.cpu.*`` down by ``cpu.logical_number``."""
    include: tuple[str, ...] = ()
    """Metric names or globs to report on top of the defaults."""
    exclude: tuple[str, ...] = ()
    """Metric names or globs not to report; exclude wins over everything."""
    max_thread_series: int = DEFAULT_MAX_THREAD_SERIES
    """Cap on per-thread series (two per thread); the busiest threads are kept."""
    attributes: Mapping[str, Any] = field(default_factory=dict)
    """Constant attributes added to every point."""

    def __post_init__(self) -> None:
        for name in ("cpu_frequency", "per_thread", "per_cpu"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ValueError(f"{name}: expected True or False, got {_show(value)}")
        for name in ("include", "exclude"):
            patterns = _as_patterns(name, getattr(self, name))
            for pattern in patterns:
                _check_pattern(name, pattern)
            object.__setattr__(self, name, patterns)
        cap = self.max_thread_series
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
            raise ValueError(f"max_thread_series: expected a whole number >= 0, got {_show(cap)}")
        object.__setattr__(self, "attributes", _check_attributes(self.attributes))

    def metrics(self, platform: str | None = None) -> tuple[Metric, ...]:
        """The metrics these options turn on, in table order, on ``platform``."""
        return tuple(m for m in METRICS if m.supported(platform) and self._enabled(m))

    def _enabled(self, metric: Metric) -> bool:
        if any(fnmatch.fnmatchcase(metric.name, p) for p in self.exclude):
            return False
        if metric.option is not None:
            return bool(getattr(self, metric.option))
        if metric.default:
            return True
        return any(
            p == metric.name or (_is_glob(p) and not metric.exact_only and _match(metric, p))
            for p in self.include
        )


def _show(value: object, limit: int = 200) -> str:
    """``repr(value)`` for an error message, shortened, even when repr() itself fails."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # int over the str limit; nesting too deep
        return f"<{type(value).__name__} that cannot be shown>"
    return text if len(text) <= limit else text[: limit - 5] + "...)" + text[-1]


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _match(metric: Metric, pattern: str) -> bool:
    return fnmatch.fnmatchcase(metric.name, pattern)


def _as_patterns(option: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValueError(
            f"{option}: expected a list of metric names or globs, got {_show(value)}"
            + (f" (write [{value!r}])" if isinstance(value, str) else "")
        )
    patterns = tuple(value)
    for p in patterns:
        if not isinstance(p, str) or not p.strip():
            raise ValueError(
                f"{option}: expected metric names or globs (non-empty strings), got {_show(p)}"
            )
    return tuple(p.strip() for p in patterns)


def _check_pattern(option: str, pattern: str) -> None:
    if _is_glob(pattern):
        if not any(_match(m, pattern) for m in METRICS):
            raise ValueError(
                f"{option}: the glob {pattern!r} matches no metric; allowed: names or "
                "globs over the names in the metric reference"
            )
        return
    metric = METRICS_BY_NAME.get(pattern)
    if metric is None:
        import difflib  # only on this error path: it costs memory at import

        close = difflib.get_close_matches(pattern, METRICS_BY_NAME, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"{option}: unknown metric name {pattern!r}{hint}; allowed: names or globs "
            "over the names in the metric reference"
        )
    if option == "include" and metric.option is not None:
        raise ValueError(
            f"include: {pattern!r} is turned on by {metric.option}=True, not by include"
        )


def _check_attributes(value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"attributes: expected {_ATTRIBUTES_ALLOWED}, got {_show(value)}")
    for key, v in value.items():
        if not isinstance(key, str) or not key or not _attribute_value_ok(v):
            raise ValueError(
                f"attributes: expected {_ATTRIBUTES_ALLOWED}, got {_show(key)}: {_show(v)}"
            )
    return MappingProxyType(dict(value))


def _attribute_value_ok(value: object) -> bool:
    # OTLP carries ints as int64 and arrays of one type: anything else is
    # dropped by the exporter at every export, with an error each time.
    if isinstance(value, (list, tuple)):
        kinds = {_kind(x) for x in value}
        return None not in kinds and len(kinds) <= 1
    return _kind(value) is not None


def _kind(value: object) -> type | None:
    """The OTLP scalar type that ``value`` is sent as, or None if it cannot be."""
    for kind in _ATTRIBUTE_TYPES:  # bool before int: bool is an int subclass
        if isinstance(value, kind):
            if kind is int and not _INT64_MIN <= value <= _INT64_MAX:  # type: ignore[operator]
                return None
            return kind
    return None


def _parse_env(name: str, raw: str) -> Any:
    """The value of environment variable ``raw`` for option ``name``, unvalidated."""
    default = getattr(ProcessMetricsOptions(), name)
    if isinstance(default, bool):
        word = raw.strip().lower()
        if word in _TRUE | _FALSE:
            return word in _TRUE
        raise ValueError("expected one of true, false, 1, 0, yes, no")
    if isinstance(default, int):
        try:
            return int(raw.strip())
        except ValueError:
            raise ValueError("expected a whole number >= 0") from None
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Options set by ``OTEL_PYTHON_PROCESS_METRICS_*``; bad ones are warned about and left out."""
    environ = os.environ if environ is None else environ
    found: dict[str, Any] = {}
    for name, var in ENV_VARS.items():
        raw = environ.get(var, "")
        if not raw.strip():
            continue
        try:
            value = _parse_env(name, raw)
            ProcessMetricsOptions(**{name: value})
        except ValueError as exc:
            default = getattr(ProcessMetricsOptions(), name)
            _logger.warning(
                "%s=%r is not valid (%s); using the default, %r.", var, raw, exc, default
            )
            continue
        found[name] = value
    return found


def resolve(
    explicit: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
) -> ProcessMetricsOptions:
    """Options from code, then the environment, then defaults.

    ``explicit`` holds keyword arguments of ``instrument()``; an ``options``
    key may hold a whole :class:`ProcessMetricsOptions`, in which case the
    environment is not read and other keywords override its fields.
    """
    explicit = dict(explicit)
    names = {f.name for f in dataclasses.fields(ProcessMetricsOptions)}
    unknown = sorted(set(explicit) - names - {"options"})
    if unknown:
        raise ValueError(
            f"unknown option {unknown[0]!r}; allowed: options, {', '.join(sorted(names))}"
        )
    base = explicit.pop("options", None)
    if base is not None:
        if not isinstance(base, ProcessMetricsOptions):
            raise ValueError(f"options: expected a ProcessMetricsOptions, got {_show(base)}")
        return dataclasses.replace(base, **explicit)
    return ProcessMetricsOptions(**{**from_environment(environ), **explicit})
