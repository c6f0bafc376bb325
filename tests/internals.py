"""The few internals that tests touch, each behind one small function.

Everything else in the tests goes through the public API. When the package's
internals move, only these functions need to follow.
"""

from __future__ import annotations

from opentelemetry.instrumentation.process import forks


def fork_wait_seconds() -> float:
    """How long a fork waits for a collection in flight (documented in prefork.md)."""
    return float(forks.FORK_WAIT_SECONDS)
