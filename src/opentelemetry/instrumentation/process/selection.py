"""Which metrics a set of options turns on.

The rules, in order: ``exclude`` wins over everything; a metric gated by a
option is on unless that option is ``False`` (``None`` is auto); a default metric is on; any
other metric is on when ``include`` names it, or when a glob of ``include``
matches it and it is not one that only its exact name enables. A glob also
matches an extension by its name after ``process_metrics.`` (``options.matches``).
"""

from __future__ import annotations

from .catalog import supported
from .metrics import METRICS, Metric
from .options import GATING_OPTIONS, ProcessMetricsOptions, is_glob, matches


def enabled_metrics(
    options: ProcessMetricsOptions, platform: str | None = None
) -> tuple[Metric, ...]:
    """The metrics ``options`` turn on, in table order, that ``platform`` supports.

    Whether a source can run here is asked only of the metrics turned on: the
    check of an opt-in probe imports its module.
    """
    return tuple(m for m in METRICS if is_enabled(m, options) and supported(m, platform))


def is_enabled(metric: Metric, options: ProcessMetricsOptions) -> bool:
    """Whether ``options`` turn ``metric`` on, on any platform."""
    if any(matches(metric.name, p) for p in options.exclude):
        return False
    if metric.option is not None:  # None (auto) is on: the snapshot side decides
        return getattr(options, metric.option) is not False
    if metric.default:
        return True
    return any(
        p == metric.name or (is_glob(p) and not metric.exact_only and matches(metric.name, p))
        for p in options.include
    )


def check_gates(metrics: tuple[Metric, ...] = METRICS) -> None:
    """Every row's ``option`` is an option declared with ``gates=True``."""
    for m in metrics:
        if m.option is not None and m.option not in GATING_OPTIONS:
            raise RuntimeError(f"metric table: {m.name} names an unknown option {m.option!r}")


check_gates()
