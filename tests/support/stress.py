"""Sizes of the stress tests: short in CI, long with ``PROCESS_METRICS_LONG=1``.

The short variants still exercise every path (threads start and stop, forks
race the export thread, several readers collect at once); the long ones run
the sizes named in the hardening issue.
"""

from __future__ import annotations

import os

LONG = os.environ.get("PROCESS_METRICS_LONG", "").strip().lower() in {"1", "true", "yes"}


def size(ci: int, long: int) -> int:
    """``long`` when ``PROCESS_METRICS_LONG=1``, else ``ci``."""
    return long if LONG else ci


def seconds(ci: float, long: float) -> float:
    """A duration in seconds: ``long`` when ``PROCESS_METRICS_LONG=1``, else ``ci``."""
    return long if LONG else ci
