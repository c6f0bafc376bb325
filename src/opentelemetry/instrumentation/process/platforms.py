"""Platform names, spelled one way, for the sources and the metric reference."""

from __future__ import annotations

import sys

import psutil

LINUX = frozenset({"linux"})
WINDOWS = frozenset({"windows"})
POSIX = frozenset({"linux", "darwin", "freebsd", "openbsd", "netbsd", "sunos", "aix"})
ALL = POSIX | WINDOWS


def current_platform() -> str:
    """This platform's name, as used in the platform sets above."""
    if psutil.WINDOWS:
        return "windows"
    if psutil.LINUX:
        return "linux"
    for name in ("darwin", "freebsd", "openbsd", "netbsd", "sunos", "aix"):
        if sys.platform.startswith(name):
            return name
    return sys.platform


ON_LINUX = current_platform() == "linux"
"""Whether direct reads of Linux kernel interfaces may be tried here."""


def _free_threaded() -> bool:
    abiflags = getattr(sys, "abiflags", None)
    if abiflags is not None:
        # POSIX: PEP 703 marks the build with "t". sysconfig says the same but
        # loads the build's whole configuration (~1 ms at every start-up).
        return "t" in abiflags
    import sysconfig  # Windows: no abiflags, and sysconfig's data is cheap there

    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


FREE_THREADED = _free_threaded()
"""Whether this is a free-threaded build of CPython (no GIL, PEP 703)."""
