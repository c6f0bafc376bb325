"""Options from ``OTEL_PYTHON_PROCESS_METRICS_*`` environment variables.

Precedence, for each option: an explicit argument, then its environment
variable, then the default. A bad variable logs one warning, with a bounded
excerpt of its value, and the default is used, so that auto-instrumentation
never crashes the host application. In ``include`` and ``exclude``, each bad
entry is left out with a warning of its own and the valid ones apply
(:func:`valid_entries`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from .excerpt import excerpt
from .options import (
    ATTRIBUTE_LIMITS,
    ENV_PREFIX,
    MAX_PATTERNS,
    OPTION_NAMES,
    ProcessMetricsOptions,
    declared,
    limit_value,
)

_logger = logging.getLogger(__name__)

_PARSERS: Mapping[str, Callable[[str], Any]] = {
    name: parse for name in OPTION_NAMES if (parse := declared(name).form.parse) is not None
}

ENV_VARS: Mapping[str, str] = {name: ENV_PREFIX + name.upper() for name in _PARSERS}
"""The environment variable of each option that has one: each whose form parses text."""

FORMATS: Mapping[str, str] = {name: declared(name).form.format for name in ENV_VARS}
"""How each variable is written, for the configuration reference."""


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
            if declared(name).form.kind == "list":  # each bad entry is left out alone
                value = valid_entries(name, var, value)
            ProcessMetricsOptions(**{name: value})
        except ValueError as exc:
            _warn(var, raw, str(exc), _default(name))
            continue
        found[name] = value
    _check_attribute_limits(environ)
    return found


def valid_entries(name: str, var: str, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The valid entries of an ``include`` or ``exclude`` list, with a warning for each other one.

    A list with no valid entry, or with too many entries, is returned whole:
    then the caller's one warning and the default apply, as for any variable.
    """
    if len(patterns) > MAX_PATTERNS:
        return patterns
    kept: list[str] = []
    refused: list[tuple[str, str]] = []
    for pattern in patterns:
        alone: dict[str, Any] = {name: (pattern,)}
        try:
            ProcessMetricsOptions(**alone)
        except ValueError as exc:
            refused.append((pattern, str(exc)))
        else:
            kept.append(pattern)
    if not kept:
        return patterns
    for pattern, why in refused:
        _logger.warning(
            "%s: the entry %s is not valid (%s); it is left out, the other entries apply.",
            var,
            excerpt(pattern),
            why[:300],
        )
    return tuple(kept)


def _default(name: str) -> str:
    value = getattr(ProcessMetricsOptions(), name)
    # The only tuple options, include and exclude, default to none.
    return "none" if value == () else excerpt(value)


def _warn(var: str, raw: str, why: str, default: str) -> None:
    _logger.warning(
        "%s=%s is not valid (%s); using the default, %s.", var, excerpt(raw), why[:300], default
    )


def _check_attribute_limits(environ: Mapping[str, str]) -> None:
    for var in ATTRIBUTE_LIMITS:
        raw = environ.get(var, "")
        if raw.strip() and limit_value(raw) is None:
            _warn(var, raw.strip(), "expected a whole number >= 0", "this package's limit")


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
            f"unknown option {excerpt(unknown[0])}; allowed: options, "
            f"{', '.join(sorted(OPTION_NAMES))}"
        )
    base = explicit.pop("options", None)
    if base is not None:
        if not isinstance(base, ProcessMetricsOptions):
            raise ValueError(f"options: expected a ProcessMetricsOptions, got {excerpt(base)}")
        return dataclasses.replace(base, **explicit)
    return ProcessMetricsOptions(**{**from_environment(environ), **explicit})
