"""Metric points as lines a person reads: one line per metric, values in readable units.

``python -m opentelemetry.instrumentation.process`` prints with it, and so does
the demo (``examples/console_demo.py``), each from its own rows. Nothing here
knows OpenTelemetry or the OS: a :class:`Point` is a plain row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

KIB, MIB, GIB = 2**10, 2**20, 2**30

FOOTNOTES: tuple[tuple[frozenset[str], str], ...] = (
    (
        frozenset({"process.disk.io", "process.disk.operations"}),
        "process.disk.operations counts read and write calls (on Linux: system calls, on "
        "files, pipes and sockets alike); process.disk.io counts the bytes that reached "
        "storage: a read served from the page cache adds an operation, not bytes.",
    ),
)
"""A note shown under the table when all the metrics it names are in it."""


class Point(NamedTuple):
    """One value of one metric, with its attributes."""

    name: str
    unit: str
    """The metric's unit, as the metric table writes it (``s``, ``By``, ``1``, ``{thread}``)."""
    attributes: Mapping[str, Any]
    value: float


def readable(value: float, unit: str) -> str:
    """``value`` in ``unit``, as a person would write it: ``12.5 %``, ``3.2 MiB``, ``4.10 ms``."""
    if unit == "1":
        return f"{value * 100:.1f} %"
    if unit == "By":
        return _bytes(value)
    if unit == "s":
        return _seconds(value)
    if unit == "Hz":
        return f"{value / 1e9:.2f} GHz" if value >= 1e9 else f"{value / 1e6:,.0f} MHz"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.3g}"
    return f"{value:,.0f}"


def _bytes(value: float) -> str:
    size = abs(value)
    if size >= GIB:
        return f"{value / GIB:,.1f} GiB"
    if size >= MIB:
        return f"{value / MIB:.1f} MiB"
    if size >= KIB:
        return f"{value / KIB:.1f} KiB"
    return f"{value:,.0f} B"


def _seconds(value: float) -> str:
    if value == 0:
        return "0 s"
    if abs(value) < 0.001:
        return f"{value * 1e6:.0f} µs"
    if abs(value) < 1:
        return f"{value * 1000:.2f} ms"
    return f"{value:,.3f} s"


def label(attributes: Mapping[str, Any]) -> str:
    """The attribute values of a point, joined by commas; a number says what it counts.

    ``user``, ``some,host``, ``generation 0``: the value alone where it is a
    word, the last part of the attribute's name before a number.
    """
    return ",".join(
        v if isinstance(v, str) else f"{k.rsplit('.', 1)[-1]} {v}" for k, v in attributes.items()
    )


def table(points: Iterable[Point], notes: Mapping[str, str] | None = None) -> list[str]:
    """One line per metric, in the order of first appearance, values aligned in one column.

    A metric with several points shows ``label=value`` for each; ``notes``
    adds ``<- note`` after the metric it names.
    """
    by_name: dict[str, list[Point]] = {}
    for point in points:
        by_name.setdefault(point.name, []).append(point)
    if not by_name:
        return []
    width = max(map(len, by_name))
    lines = []
    for name, found in by_name.items():
        parts = []
        for point in found:
            shown = readable(point.value, point.unit)
            text = label(point.attributes)
            parts.append(f"{text}={shown}" if text else shown)
        note = (notes or {}).get(name)
        lines.append(f"{name:<{width}}  {'  '.join(parts)}" + (f"   <- {note}" if note else ""))
    return lines


def footnotes(names: Iterable[str]) -> list[str]:
    """The notes of :data:`FOOTNOTES` whose metrics are all among ``names``."""
    present = set(names)
    return [text for metrics, text in FOOTNOTES if metrics <= present]
