"""Platform names, spelled one way, for the sources and the metric reference."""

from __future__ import annotations

import sys
import sysconfig

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

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
"""Whether this is a free-threaded build of CPython (no GIL, PEP 703)."""
