"""Which interpreter runs this code: the package measures from the main interpreter only.

A subinterpreter (mod_wsgi's per-application ones, uWSGI with several apps,
``concurrent.interpreters`` from 3.14) runs ``site``, and so
``opentelemetry-instrument``'s start-up, again. The process is measured once,
from the main interpreter: a thread started in a subinterpreter and alive when
it ends aborts the whole process (``Py_EndInterpreter: not the last thread``),
and psutil, a single-phase extension, cannot be imported in one with a GIL of
its own. See docs/troubleshooting.md.
"""

from __future__ import annotations

import _thread
import logging

_logger = logging.getLogger(__package__)


def is_main() -> bool:
    """Whether this is the main interpreter (True where it cannot be told, as on PyPy)."""
    check = getattr(_thread, "_is_main_interpreter", None)  # 3.12+
    if check is not None:
        return bool(check())
    try:  # 3.10, 3.11
        import _xxsubinterpreters as interpreters  # type: ignore[import-not-found]
    except ImportError:
        return True
    return bool(interpreters.get_current() == interpreters.get_main())


def log_not_main() -> None:
    """The one line a subinterpreter logs instead of measuring (INFO: nothing is wrong)."""
    # The directive passed as an argument: a message without arguments is not %-formatted.
    _logger.info(
        "process metrics: not reported from this subinterpreter; the main interpreter of "
        "the process reports them (instrument there, or run the application in the main "
        "interpreter: mod_wsgi's %s)",
        "WSGIApplicationGroup %{GLOBAL}",
    )
