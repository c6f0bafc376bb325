"""The options of the instrumentor: one frozen dataclass, checked when it is built.

A bad value raises ``ValueError`` naming the option, a bounded excerpt of the
value, and what is allowed. Reading the options from the environment is in
``environment.py``; which metrics they turn on is in ``selection.py``.
"""

from __future__ import annotations

import fnmatch
import itertools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from .metrics import GATING_OPTIONS, METRICS, METRICS_BY_NAME

DEFAULT_MAX_THREAD_SERIES = 200
"""100 threads, each with a ``user`` and a ``system`` series."""

MAX_PATTERNS = 100
"""Most names or globs in ``include`` or in ``exclude``: the whole table has fewer metrics."""
MAX_PATTERN_LENGTH = 200
"""Longest name or glob: every metric name is far shorter."""

DEFAULT_ATTRIBUTE_COUNT_LIMIT = 128
"""Most constant attributes, as ``OTEL_ATTRIBUTE_COUNT_LIMIT``'s default."""
DEFAULT_ATTRIBUTE_VALUE_LENGTH_LIMIT = 4096
"""Longest string, and most elements of a sequence, in one constant attribute value.

The specification's default is no limit; constant attributes are copied onto
every point of every collection, so this package bounds them by default.
``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`` overrides it.
"""

DEFAULT_MAX_CHILDREN = 64
"""Most descendant processes reported one by one with ``children=True``."""

SHARED_METRICS = ("once", "every")
"""Who reports the host, cgroup and pressure metrics: one process of the group, or each."""

TREE_ROOT = ("self", "parent")
"""Whose descendants supervisor mode reports: this process's, or its parent's."""

THREAD_SERIES_BY = ("thread", "name")
"""What a per-thread series stands for: one thread, or one thread-name pattern."""

_ATTRIBUTE_TYPES = (str, bool, int, float)  # bool before int: see _kind
_ATTRIBUTES_ALLOWED = (
    "a mapping of str to str, bool, int (64-bit), float or a sequence of one of those"
)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class ProcessMetricsOptions:
    """What to report. Every field is checked when the object is built.

    Raises ``ValueError`` naming the option, the value given (shortened) and
    what is allowed. Built directly, it does not read the
    ``OTEL_PYTHON_PROCESS_METRICS_*`` variables (``instrument()`` does); only
    the attribute limits come from ``OTEL_ATTRIBUTE_*_LIMIT``.
    """

    cpu_frequency: bool = False
    """Register ``system.cpu.frequency`` and the min/max extensions (costs reads per CPU)."""
    per_thread: bool = False
    """Report ``process_metrics.thread.cpu.time`` per thread."""
    per_cpu: bool = False
    """Break ``system.cpu.*`` down by ``cpu.logical_number``."""
    include: tuple[str, ...] = ()
    """Metric names or globs to report on top of the defaults (any iterable of str)."""
    exclude: tuple[str, ...] = ()
    """Metric names or globs not to report; exclude wins over everything."""
    max_thread_series: int = DEFAULT_MAX_THREAD_SERIES
    """Cap on per-thread series, an even number (two per thread); the busiest threads are kept."""
    thread_series_by: str = "thread"
    """``"thread"``: a series per thread. ``"name"``: a series per thread-name pattern.

    ``"name"`` replaces each run of digits in a thread's name with ``N``, so
    that threads started one per request or per scrape (``Thread-12 (...)``)
    add up in one stable series instead of a new series each.
    """
    attributes: Mapping[str, Any] = field(default_factory=dict)
    """Constant attributes added to every point (bounded: see the configuration reference)."""
    saturation: bool | None = None
    """Container CPU throttling, memory headroom and OOM kills, pressure stalls (Linux).

    ``None`` (auto): the cgroup metrics when a CPU quota or a memory limit
    applies to the process, pressure stalls whenever the kernel has them.
    ``True`` forces them on where the files exist; ``False`` turns them off.
    """
    gc_pause_histogram: bool = False
    """Count garbage-collection pauses in buckets from 10 µs to 1 s (a histogram as counters)."""
    event_loop: bool = False
    """Measure how late each asyncio event loop runs a timer (``process_metrics.eventloop.*``)."""
    direct_reads: bool = True
    """On Linux, read a few kernel interfaces directly where psutil costs more per item.

    Turn off to troubleshoot: psutil is then used wherever it has the value.
    """
    shared_metrics: str = "once"
    """``"once"``: one process of a group reports the shared metrics. ``"every"``: each does.

    A group is the processes of one user in one cgroup on one boot of one
    host (a container, a systemd service). The shared metrics are the host
    ones (``system.*``), the container and cgroup ones and the pressure
    stalls; the group elects its reporter by a lock the kernel frees when the
    holder dies, and another process takes over at its next collection.
    """

    children: bool = False
    """Supervisor mode: also report every descendant process (the workers), each by its slot.

    Adds per-child points to the process metrics that can be read from outside
    (attribute ``process_metrics.worker.slot``) and the ``process_metrics.tree.*``
    totals of this process and all its descendants.
    """
    max_children: int = DEFAULT_MAX_CHILDREN
    """Cap on descendants reported one by one: the lowest slots are kept; tree totals count all."""
    child_pid: bool = False
    """Add ``process.pid`` to per-child points (it churns a series at every restart)."""
    tree_root: str = "self"
    """``"self"``: the tree is this process and its descendants. ``"parent"``: its parent's.

    ``"parent"`` is for a helper process of a server (a uWSGI mule) that reports
    the whole server, so that the master itself runs no Python thread. The tree
    then counts the parent, all its descendants (this process included) and
    what the parent reaped; this process gets no per-child points of its own.
    """

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" and not isinstance(value, bool):
                raise ValueError(f"{f.name}: expected True or False, got {show(value)}")
        for name in ("include", "exclude"):
            object.__setattr__(self, name, _check_patterns(name, getattr(self, name)))
        if self.saturation is not None and not isinstance(self.saturation, bool):
            raise ValueError(
                f"saturation: expected True, False or None (auto), got {show(self.saturation)}"
            )
        _check_thread_cap(self.max_thread_series)
        _check_children_cap(self.max_children)
        if self.tree_root not in TREE_ROOT:
            raise ValueError(
                f"tree_root: expected one of {', '.join(map(repr, TREE_ROOT))}, "
                f"got {show(self.tree_root)}"
            )
        if self.thread_series_by not in THREAD_SERIES_BY:
            raise ValueError(
                f"thread_series_by: expected one of {', '.join(map(repr, THREAD_SERIES_BY))}, "
                f"got {show(self.thread_series_by)}"
            )
        if self.shared_metrics not in SHARED_METRICS:
            raise ValueError(
                f"shared_metrics: expected one of {', '.join(map(repr, SHARED_METRICS))}, "
                f"got {show(self.shared_metrics)}"
            )
        object.__setattr__(self, "attributes", _check_attributes(self.attributes))


OPTION_NAMES = tuple(f.name for f in fields(ProcessMetricsOptions))
if not set(GATING_OPTIONS) <= set(OPTION_NAMES):  # the table names only real options
    raise RuntimeError(f"metric table: an option of {GATING_OPTIONS} is not an option")


def show(value: object, limit: int = 200) -> str:
    """``repr(value)`` for a message, at most ``limit`` characters, even when repr() fails."""
    # repr() of a huge value costs its whole size: shorten it first.
    if isinstance(value, (str, list, tuple)) and len(value) > limit:
        value = value[: limit + 1]
    elif isinstance(value, dict) and len(value) > limit:
        value = dict(itertools.islice(value.items(), limit + 1))
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # int over the str limit; nesting too deep
        return f"<{type(value).__name__} that cannot be shown>"
    return text if len(text) <= limit else text[: limit - 5] + "...)" + text[-1]


def is_glob(pattern: str) -> bool:
    """Whether ``pattern`` has a glob character (``*``, ``?`` or ``[``)."""
    return any(c in pattern for c in "*?[")


def _check_patterns(option: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        hint = f" (write [{show(value, 60)}])" if isinstance(value, str) else ""
        raise ValueError(
            f"{option}: expected a list of metric names or globs, got {show(value)}{hint}"
        )
    patterns: list[str] = []
    for p in value:
        if len(patterns) == MAX_PATTERNS:
            raise ValueError(
                f"{option}: expected at most {MAX_PATTERNS} metric names or globs, got more"
            )
        if not isinstance(p, str) or not p.strip() or len(p.strip()) > MAX_PATTERN_LENGTH:
            raise ValueError(
                f"{option}: expected metric names or globs (non-empty strings of at most "
                f"{MAX_PATTERN_LENGTH} characters), got {show(p)}"
            )
        patterns.append(p.strip())
    for pattern in patterns:
        _check_pattern(option, pattern)
    return tuple(patterns)


def _check_pattern(option: str, pattern: str) -> None:
    if is_glob(pattern):
        if not any(fnmatch.fnmatchcase(m.name, pattern) for m in METRICS):
            raise ValueError(
                f"{option}: the glob {show(pattern)} matches no metric; allowed: names or "
                "globs over the names in the metric reference"
            )
        return
    metric = METRICS_BY_NAME.get(pattern)
    if metric is None:
        import difflib  # only on this error path: it costs memory at import

        close = difflib.get_close_matches(pattern, METRICS_BY_NAME)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"{option}: unknown metric name {show(pattern)}{hint}; allowed: names or globs "
            "over the names in the metric reference"
        )
    if option == "include" and metric.option is not None:
        raise ValueError(
            f"include: {pattern!r} is turned on by {metric.option}=True, not by include"
        )


def _check_thread_cap(cap: object) -> None:
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
        raise ValueError(f"max_thread_series: expected a whole number >= 0, got {show(cap)}")
    if cap % 2:
        raise ValueError(
            f"max_thread_series: expected an even number (each thread has a user and a "
            f"system series), got {cap}"
        )


def _check_children_cap(cap: object) -> None:
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
        raise ValueError(f"max_children: expected a whole number >= 0, got {show(cap)}")


def attribute_limits(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``(count limit, value length limit)`` for constant attributes.

    From ``OTEL_ATTRIBUTE_COUNT_LIMIT`` and ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``
    where they hold a whole number >= 0, else the defaults (the environment
    module warns about a bad value once).
    """
    environ = os.environ if environ is None else environ
    return (
        _limit(environ, "OTEL_ATTRIBUTE_COUNT_LIMIT", DEFAULT_ATTRIBUTE_COUNT_LIMIT),
        _limit(environ, "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", DEFAULT_ATTRIBUTE_VALUE_LENGTH_LIMIT),
    )


def _limit(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() else default


def _check_attributes(value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"attributes: expected {_ATTRIBUTES_ALLOWED}, got {show(value)}")
    count_limit, length_limit = attribute_limits()
    if len(value) > count_limit:
        raise ValueError(
            f"attributes: expected at most {count_limit} attributes "
            f"(OTEL_ATTRIBUTE_COUNT_LIMIT), got {len(value)}"
        )
    for key, v in value.items():
        length = _length(v, length_limit)
        if isinstance(key, str) and key and length > length_limit:
            raise ValueError(
                f"attributes: {show(key)}: expected a value of at most {length_limit} "
                f"characters or elements (OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT), got "
                f"{length}: {show(v)}"
            )
        if not isinstance(key, str) or not key or not _attribute_value_ok(v):
            raise ValueError(
                f"attributes: expected {_ATTRIBUTES_ALLOWED}, got {show(key)}: {show(v)}"
            )
    return MappingProxyType(dict(value))


def _length(value: object, limit: int) -> int:
    """Characters of a string; elements of a sequence, or its longest string if longer."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple)):
        if len(value) > limit:
            return len(value)  # refused anyway: do not walk a huge sequence
        return max([len(value), *(len(x) for x in value if isinstance(x, str))])
    return 0


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
