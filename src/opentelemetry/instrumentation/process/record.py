"""A plain record: named fields in ``__slots__``, compared, printed and copied by them.

What this package used of a NamedTuple (``_replace``, ``_asdict``, equality,
a readable repr), without what each NamedTuple class costs: some 30
GC-tracked objects (its generated functions and their closures, a
``ForwardRef`` and a getter per field) that every full garbage collection of
the host walks (tests/test_objects.py). A subclass lists its fields in
``__slots__`` and sets them in its ``__init__``; it is not a tuple.
"""

from __future__ import annotations

from typing import Any, TypeVar

_R = TypeVar("_R", bound="Record")


class Record:
    """Fields in the subclass's ``__slots__``, in order: ``_fields``."""

    __slots__ = ()

    @property
    def _fields(self) -> tuple[str, ...]:
        fields: tuple[str, ...] = type(self).__slots__
        return fields

    def _asdict(self) -> dict[str, Any]:
        """The fields by name, in order."""
        return {name: getattr(self, name) for name in self._fields}

    def _replace(self: _R, **changes: Any) -> _R:
        """A copy with ``changes``; a name that is not a field raises ValueError."""
        unknown = set(changes).difference(self._fields)
        if unknown:
            raise ValueError(f"{type(self).__name__}: no fields {sorted(unknown)!r}")
        copy = object.__new__(type(self))
        for name in self._fields:
            object.__setattr__(copy, name, changes.get(name, getattr(self, name)))
        return copy

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._fields)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, name) for name in self._fields))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({shown})"
