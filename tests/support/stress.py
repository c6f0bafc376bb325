"""Sizes of the stress tests: short in CI, long with ``PROCESS_METRICS_LONG=1``.

The short variants still exercise every path (threads start and stop, forks
race the export thread, several readers collect at once); the long ones run
the sizes named in the hardening issue. ``make check``, the edit-test loop,
sets ``PROCESS_METRICS_QUICK=1``: a fifth of the CI counts.
"""

from __future__ import annotations

import os

LONG = os.environ.get("PROCESS_METRICS_LONG", "").strip().lower() in {"1", "true", "yes"}
QUICK = os.environ.get("PROCESS_METRICS_QUICK", "").strip().lower() in {"1", "true", "yes"}


def size(ci: int, long: int) -> int:
    """``long`` when ``PROCESS_METRICS_LONG=1``, a fifth of ``ci`` (at least 1) when
    ``PROCESS_METRICS_QUICK=1``, else ``ci``."""
    if LONG:
        return long
    return max(1, ci // 5) if QUICK else ci


def seconds(ci: float, long: float) -> float:
    """A duration in seconds: ``long`` when ``PROCESS_METRICS_LONG=1``, else ``ci``."""
    return long if LONG else ci
