"""Snapshot sources: each one reads one thing from the OS or the runtime.

Sources are grouped by what they read, one module each, which declares them in
its ``SOURCES``; ``SOURCES`` here joins those of every such module of this
package (``tests/test_layout.py`` checks that none is left out), in the order
of their ``needs``. What every source shares is in ``base.py``; direct reads of
Linux kernel interfaces live in the ``linux`` package. Nothing here knows
about OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import children, host, process, runtime, saturation
from .base import Delta, DirectRead, Key, ReadContext, Reading, Source, Value

SOURCES: Mapping[str, Source] = {
    s.name: s
    for s in (
        *process.SOURCES,
        *runtime.SOURCES,
        *host.SOURCES,
        *saturation.SOURCES,
        *children.SOURCES,
    )
}

__all__ = ["SOURCES", "Delta", "DirectRead", "Key", "ReadContext", "Reading", "Source", "Value"]
