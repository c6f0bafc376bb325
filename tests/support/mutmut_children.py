"""Under mutmut's stats pass, the functions that forked children run count as hit.

mutmut learns which tests reach a function by recording the trampoline hits of
each test in its own memory; a forked child records into its copy, lost when
it exits. The after-fork hooks, and every read a test makes in a child (a new
network namespace, a cgroup), were then "not tested", or tested only by the
tests that happen to call them in the parent. Here a child's new hits go into
a shared anonymous mapping, which the parent reads back before mutmut's
teardown hook takes the test's hits. No file is opened in the child, so tests
that count a child's descriptors or opens see nothing of this.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

_SIZE = 1 << 22
_HEADER = 8
_shared = mmap.mmap(-1, _SIZE)  # MAP_SHARED | MAP_ANONYMOUS: children write, the parent reads


class _Shared(set[str]):
    """A child's hits: each new one appended to the shared mapping as it comes."""

    def add(self, name: str) -> None:
        if name in self:
            return
        super().add(name)
        data = name.encode() + b"\n"
        end = int.from_bytes(_shared[:_HEADER], "little")
        if _HEADER + end + len(data) <= _SIZE:  # a full mapping loses hits, never fails
            _shared[_HEADER + end : _HEADER + end + len(data)] = data
            _shared[:_HEADER] = (end + len(data)).to_bytes(_HEADER, "little")


def _state() -> Any:
    from mutmut.state import state

    return state()


def _in_child() -> None:
    _state()._stats = _Shared()


def install() -> None:
    """Gather forked children's hits from now on (call in the stats pass only)."""
    os.register_at_fork(after_in_child=_in_child)


def gather() -> None:
    """Add the children's hits since the last call to this process's own."""
    end = int.from_bytes(_shared[:_HEADER], "little")
    if end:
        names = bytes(_shared[_HEADER : _HEADER + end]).decode(errors="replace").split("\n")
        _state()._stats.update(n for n in names if n)
        _shared[:_HEADER] = bytes(_HEADER)
