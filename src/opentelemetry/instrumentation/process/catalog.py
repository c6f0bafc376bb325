"""The metric table joined to its sources: what each metric's points carry, where, at what cost.

A row of ``metrics.py`` names its source and field by id; this module
resolves the join, and checks the table at import (supervisor mode's rows
when they are first used: a process without ``children=True`` never loads
their sources).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .metrics import METRICS, Metric
from .sources import SOURCES

SUPERVISOR_OPTION = "children"
"""The option of supervisor mode, whose sources (``sources/children.py``) load at first use."""

if TYPE_CHECKING:
    PER_CHILD: dict[str, Metric]
    """Supervisor mode: the rows of the process metrics that get a point per child, by name.

    Same name, kind, unit and field; the source is the children source that
    mirrors the metric's own (``sources/children.py``), and the attributes start
    with the child's slot (and ``process.pid``, opt-in). Built at its first use,
    which imports supervisor mode's sources, and then checked with the table.
    """


def __getattr__(name: str) -> Any:
    if name != "PER_CHILD":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _per_child()


def _per_child() -> dict[str, Metric]:
    global PER_CHILD
    found: dict[str, Metric] | None = globals().get("PER_CHILD")
    if found is not None:
        return found
    from .sources import children

    rows = {
        m.name: m._replace(source=c.name)
        for m in METRICS
        for c in children.PER_CHILD
        if c.mirrors == m.source and m.field in c.fields
    }
    _check_rows((*(m for m in METRICS if m.option == SUPERVISOR_OPTION), *rows.values()))
    PER_CHILD = rows
    return rows


def attributes_of(metric: Metric) -> tuple[str, ...]:
    """Attribute names of its points: those its source's field declares, in order."""
    key = SOURCES[metric.source].fields[metric.field]
    return key.names if key is not None else ()


def cost_of(metric: Metric) -> str:
    """What reading its source costs, in words (for the metric reference)."""
    return SOURCES[metric.source].cost


def platforms_of(metric: Metric) -> frozenset[str]:
    """Where it can be reported: its source's platforms, or its field's."""
    source = SOURCES[metric.source]
    return source.field_platforms.get(metric.field, source.platforms)


def supported(metric: Metric, platform: str | None = None) -> bool:
    """Whether it can be reported on ``platform`` (default: this one)."""
    return SOURCES[metric.source].supported(platform, metric.field)


def check_table(metrics: tuple[Metric, ...] = METRICS, *, supervisor: bool = True) -> None:
    """Names are unique; every row (per-child ones too) names a source and one of its fields.

    ``supervisor=False`` leaves out supervisor mode's rows (the per-child ones and
    those its option turns on), whose sources would load: the import checks those
    when it builds ``PER_CHILD``, at its first use.
    """
    if len({m.name for m in metrics}) != len(metrics):
        raise RuntimeError("metric table: a name is declared twice")
    if supervisor:
        _check_rows((*metrics, *_per_child().values()))
    else:
        _check_rows(tuple(m for m in metrics if m.option != SUPERVISOR_OPTION))


def _check_rows(rows: tuple[Metric, ...]) -> None:
    for m in rows:
        source = SOURCES.get(m.source)
        if source is None:
            raise RuntimeError(f"metric table: {m.name} names an unknown source {m.source!r}")
        if m.field not in source.fields:
            raise RuntimeError(
                f"metric table: {m.name} reads field {m.field!r}, which source "
                f"{m.source!r} does not declare"
            )


check_table(supervisor=False)
