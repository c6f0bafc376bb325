"""Under mutmut's stats pass, the functions that forked children run count as hit.

mutmut learns which tests reach a function by recording the trampoline hits of
each test in its own memory; a forked child records into its copy, lost when
it exits. The after-fork hooks, and every read a test makes in a child (a new
network namespace, a cgroup), were then "not tested", or tested only by the
tests that happen to call them in the parent. Here a child's new hits go into
a shared anonymous mapping, which the parent reads back before mutmut's
teardown hook takes the test's hits. No file is opened in the child, so tests
that count a child's descriptors or opens see nothing of this.

The code that a package module's body runs at import is the other blind
spot: it runs once, so mutmut gives it to whichever test imported the module
first, and its mutant runs fork from a process that imported the original.
Those functions are given, in addition, to the tests marked ``import_time``,
which compare what fresh interpreters declare.
"""

from __future__ import annotations

import mmap
import os
import sys
from typing import Any

_SIZE = 1 << 22
_HEADER = 8
_AT_IMPORT = "!"
"""Marks a child's hit made by a package module's body."""
_shared = mmap.mmap(-1, _SIZE)  # MAP_SHARED | MAP_ANONYMOUS: children write, the parent reads
_package_dir = ""
_at_import: set[str] = set()
"""The functions a package module's body called, in this process or a forked child."""


def _in_a_module_body() -> bool:
    """Whether the caller's caller runs, at some depth, in a package module's body."""
    frame = sys._getframe(3)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and code.co_filename.startswith(_package_dir):
            return True
        frame = frame.f_back
    return False


class _Recorder(set[str]):
    """This process's hits, noting the import-time ones."""

    def add(self, name: str) -> None:
        if name in self:
            return
        super().add(name)
        if name not in _at_import and _in_a_module_body():
            _at_import.add(name)


class _Shared(set[str]):
    """A child's hits: each new one appended to the shared mapping as it comes."""

    def add(self, name: str) -> None:
        if name in self:
            return
        super().add(name)
        data = (_AT_IMPORT if _in_a_module_body() else "") + name + "\n"
        encoded = data.encode()
        end = int.from_bytes(_shared[:_HEADER], "little")
        if _HEADER + end + len(encoded) <= _SIZE:  # a full mapping loses hits, never fails
            _shared[_HEADER + end : _HEADER + end + len(encoded)] = encoded
            _shared[:_HEADER] = (end + len(encoded)).to_bytes(_HEADER, "little")


def _state() -> Any:
    from mutmut.state import state

    return state()


def _in_child() -> None:
    _state()._stats = _Shared()


def install(package_dir: str) -> None:
    """Gather forked children's hits, and note the import-time ones, from now on.

    Call in the stats pass only, once the package (under ``package_dir``) is imported:
    the hits before the call are the conftest's imports.
    """
    global _package_dir
    _package_dir = package_dir
    state = _state()
    _at_import.update(state._stats)
    state._stats = _Recorder(state._stats)
    os.register_at_fork(after_in_child=_in_child)


def give_import_time_hits(nodeids: list[str]) -> None:
    """Add these tests to those of every function a package module's body called."""
    tests = _state().tests_by_mangled_function_name
    for name in _at_import:
        tests[name].update(nodeids)


def gather() -> None:
    """Add the children's hits since the last call to this process's own."""
    end = int.from_bytes(_shared[:_HEADER], "little")
    if end:
        lines = bytes(_shared[_HEADER : _HEADER + end]).decode(errors="replace").split("\n")
        names = {line.removeprefix(_AT_IMPORT) for line in lines if line}
        _at_import.update(line[1:] for line in lines if line.startswith(_AT_IMPORT))
        _state()._stats.update(names)
        _shared[:_HEADER] = bytes(_HEADER)
