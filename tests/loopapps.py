"""A re-export of ``tests/support/loopapps.py``, so that ``tests/test_runtime.py``
imports unchanged.
Remove once it imports from ``tests.support``.
"""

from .support.loopapps import (
    DELAY_MAX,
    LOOP_METRICS,
    by_loop,
    in_thread,
    live_timers,
    periodic_app,
    uvloop,
)

__all__ = [
    "by_loop",
    "DELAY_MAX",
    "in_thread",
    "live_timers",
    "LOOP_METRICS",
    "periodic_app",
    "uvloop",
]
