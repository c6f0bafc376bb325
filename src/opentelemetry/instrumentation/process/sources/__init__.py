"""Snapshot sources: each one reads one thing from the OS or the runtime.

Sources are grouped by what they read, one module each, which declares them in
its ``SOURCES``; ``SOURCES`` here joins those of every such module of this
package (``tests/test_layout.py`` checks that none is left out), in the order
of their ``needs``. What every source shares is in ``base.py``; direct reads of
Linux kernel interfaces live in the ``linux`` package. Nothing here knows
about OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, MutableMapping

from . import host, process, runtime, saturation
from .base import Delta, DirectRead, Key, ReadContext, Reading, Source, Value


class Sources(MutableMapping[str, Source]):
    """Every source by name, in the order of their ``needs``.

    Supervisor mode's sources (``children.py``, read with ``children=True``
    only) are imported at their first use: a look-up of a name the others do
    not have, or a walk over all. A process that never asks for them does not
    import them, whose objects every full garbage collection would walk.
    """

    def __init__(self, *declared: tuple[Source, ...]) -> None:
        self._found = {s.name: s for sources in declared for s in sources}
        self._complete = False

    def _all(self) -> dict[str, Source]:
        if not self._complete:
            from . import children  # last in the order: it mirrors the process sources

            self._found.update((s.name, s) for s in children.SOURCES)
            self._complete = True
        return self._found

    def among(self, names: Collection[str]) -> tuple[Source, ...]:
        """The sources named in ``names``, in order; supervisor mode's load only if named."""
        found = self._found if all(n in self._found for n in names) else self._all()
        return tuple(s for s in found.values() if s.name in names)

    def __getitem__(self, name: str) -> Source:
        found = self._found.get(name)
        return found if found is not None else self._all()[name]

    def __setitem__(self, name: str, source: Source) -> None:
        self._all()[name] = source

    def __delitem__(self, name: str) -> None:
        del self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


SOURCES = Sources(process.SOURCES, runtime.SOURCES, host.SOURCES, saturation.SOURCES)

__all__ = [
    "SOURCES",
    "Delta",
    "DirectRead",
    "Key",
    "ReadContext",
    "Reading",
    "Source",
    "Sources",
    "Value",
]
