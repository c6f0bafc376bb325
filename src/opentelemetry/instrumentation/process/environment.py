"""Options from ``OTEL_PYTHON_PROCESS_METRICS_*`` environment variables.

Precedence, for each option: an explicit argument, then its environment
variable, then the default. A bad variable logs one warning, with a bounded
excerpt of its value, and the default is used, so that auto-instrumentation
never crashes the host application.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from .options import OPTION_NAMES, ProcessMetricsOptions, show

_logger = logging.getLogger(__name__)

ENV_PREFIX = "OTEL_PYTHON_PROCESS_METRICS_"
ENV_VARS: Mapping[str, str] = {
    "cpu_frequency": ENV_PREFIX + "CPU_FREQUENCY",
    "per_thread": ENV_PREFIX + "PER_THREAD",
    "per_cpu": ENV_PREFIX + "PER_CPU",
    "include": ENV_PREFIX + "INCLUDE",
    "exclude": ENV_PREFIX + "EXCLUDE",
    "max_thread_series": ENV_PREFIX + "MAX_THREAD_SERIES",
    "direct_reads": ENV_PREFIX + "DIRECT_READS",
    "thread_series_by": ENV_PREFIX + "THREAD_SERIES_BY",
    "saturation": ENV_PREFIX + "SATURATION",
    "gc_pause_histogram": ENV_PREFIX + "GC_PAUSE_HISTOGRAM",
    "event_loop": ENV_PREFIX + "EVENT_LOOP",
    "shared_metrics": ENV_PREFIX + "SHARED_METRICS",
    "children": ENV_PREFIX + "CHILDREN",
    "max_children": ENV_PREFIX + "MAX_CHILDREN",
    "child_pid": ENV_PREFIX + "CHILD_PID",
    "tree_root": ENV_PREFIX + "TREE_ROOT",
}
"""The environment variable of each option that has one."""

ATTRIBUTE_LIMIT_VARS = ("OTEL_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


def _boolean(raw: str) -> bool:
    word = raw.strip().lower()
    if word in _TRUE | _FALSE:
        return word in _TRUE
    raise ValueError("expected one of true, false, 1, 0, yes, no")


def _boolean_or_auto(raw: str) -> bool | None:
    if raw.strip().lower() == "auto":
        return None
    try:
        return _boolean(raw)
    except ValueError:
        raise ValueError("expected auto, or one of true, false, 1, 0, yes, no") from None


def _whole_number(raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError("expected a whole number >= 0") from None


def _patterns(raw: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in raw.split(",") if p.strip())


_PARSERS: Mapping[str, Callable[[str], Any]] = {
    "cpu_frequency": _boolean,
    "per_thread": _boolean,
    "per_cpu": _boolean,
    "include": _patterns,
    "exclude": _patterns,
    "max_thread_series": _whole_number,
    "direct_reads": _boolean,
    "thread_series_by": lambda raw: raw.strip().lower(),
    "saturation": _boolean_or_auto,
    "gc_pause_histogram": _boolean,
    "event_loop": _boolean,
    "shared_metrics": lambda raw: raw.strip().lower(),
    "children": _boolean,
    "max_children": _whole_number,
    "child_pid": _boolean,
    "tree_root": lambda raw: raw.strip().lower(),
}


FORMATS: Mapping[str, str] = {
    "cpu_frequency": "`true`, `false`, `1`, `0`, `yes` or `no` (any case)",
    "per_thread": "`true`, `false`, `1`, `0`, `yes` or `no` (any case)",
    "per_cpu": "`true`, `false`, `1`, `0`, `yes` or `no` (any case)",
    "include": "comma-separated names or globs, e.g. `cpython.gc.*,system.disk.io`",
    "exclude": "comma-separated names or globs, e.g. `cpython.gc.*,system.disk.io`",
    "max_thread_series": "a whole, even number",
    "direct_reads": "`true`, `false`, `1`, `0`, `yes` or `no` (any case)",
    "thread_series_by": "`thread` or `name` (any case)",
    "saturation": "`auto`, or `true`, `false`, `1`, `0`, `yes` or `no` (any case)",
    "gc_pause_histogram": "`true`, `false`, `1`, `0`, `yes` or `no` (any case)",
    "event_loop": "`true`, `false`, `1`, `0`, `yes` or `no` (any case)",
    "shared_metrics": "`once` or `every` (any case)",
    "children": "`true`, `false`, `1`, `0`, `yes` or `no` (any case)",
    "max_children": "a whole number",
    "child_pid": "`true`, `false`, `1`, `0`, `yes` or `no` (any case)",
    "tree_root": "`self` or `parent` (any case)",
}
"""How each variable is written, for the configuration reference."""
if FORMATS.keys() != ENV_VARS.keys():  # one row per variable, checked at import
    raise RuntimeError("environment: FORMATS and ENV_VARS name different options")


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Options set by ``OTEL_PYTHON_PROCESS_METRICS_*``; bad ones are warned about and left out."""
    environ = os.environ if environ is None else environ
    found: dict[str, Any] = {}
    for name, var in ENV_VARS.items():
        raw = environ.get(var, "")
        if not raw.strip():
            continue
        try:
            value = _PARSERS[name](raw)
            ProcessMetricsOptions(**{name: value})
        except ValueError as exc:
            _warn(var, raw, str(exc), _default(name))
            continue
        found[name] = value
    _check_attribute_limits(environ)
    return found


def _default(name: str) -> str:
    value = getattr(ProcessMetricsOptions(), name)
    # The only tuple options, include and exclude, default to none.
    return "none" if value == () else show(value)


def _warn(var: str, raw: str, why: str, default: str) -> None:
    _logger.warning(
        "%s=%s is not valid (%s); using the default, %s.", var, show(raw), why[:300], default
    )


def _check_attribute_limits(environ: Mapping[str, str]) -> None:
    for var in ATTRIBUTE_LIMIT_VARS:
        raw = environ.get(var, "").strip()
        if raw and not (raw.isascii() and raw.isdigit()):
            _warn(var, raw, "expected a whole number >= 0", "this package's limit")


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
    unknown = sorted(set(explicit) - set(OPTION_NAMES) - {"options"})
    if unknown:
        raise ValueError(
            f"unknown option {show(unknown[0])}; allowed: options, "
            f"{', '.join(sorted(OPTION_NAMES))}"
        )
    base = explicit.pop("options", None)
    if base is not None:
        if not isinstance(base, ProcessMetricsOptions):
            raise ValueError(f"options: expected a ProcessMetricsOptions, got {show(base)}")
        return dataclasses.replace(base, **explicit)
    return ProcessMetricsOptions(**{**from_environment(environ), **explicit})
