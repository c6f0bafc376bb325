"""Log lines for faults that would otherwise repeat at every collection.

A fault is *where* it happened (a source, a metric, a static fact) and the
type of the exception. Its first occurrence is logged at once. Repeats within
:data:`FAULT_LOG_PERIOD` are only counted; the first one after the period is
logged again, with that count. A source that fails at every collection of a
60 s export interval thus writes one line per 5 minutes, not 60 per hour.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable
from typing import Any

FAULT_LOG_PERIOD = 300.0
"""Seconds during which a repeat of the same fault is counted, not logged."""

_MAX_FAULTS = 256  # distinct faults remembered; the oldest is forgotten first

_default_logger = logging.getLogger(__name__)


class FaultLog:
    """Rate-limits log lines per distinct fault; see the module docstring."""

    def __init__(
        self, period: float = FAULT_LOG_PERIOD, *, logger: logging.Logger | None = None
    ) -> None:
        self.period = period
        self.logger = logger or _default_logger
        # fault -> (monotonic time it was last logged, repeats not logged since)
        self._faults: dict[Hashable, tuple[float, int]] = {}

    def log(self, level: int, fault: Hashable, msg: str, *args: Any, exc_info: Any = None) -> bool:
        """Log ``msg % args`` unless ``fault`` was logged less than a period ago.

        Returns whether a line was written. Never raises.
        """
        now = time.monotonic()
        last = self._faults.get(fault)
        if last is not None and now - last[0] < self.period:
            self._faults[fault] = (last[0], last[1] + 1)
            return False
        if last is None and len(self._faults) >= _MAX_FAULTS:
            del self._faults[next(iter(self._faults))]
        self._faults[fault] = (now, 0)
        if last is not None and last[1]:
            msg += " (%d more times since it was last logged %.0f s ago)"
            args = (*args, last[1], now - last[0])
        try:
            self.logger.log(level, msg, *args, exc_info=exc_info)
        except Exception:  # noqa: BLE001 - a broken log handler must not break a collection
            return False
        return True

    def warning(self, fault: Hashable, msg: str, *args: Any, exc_info: Any = None) -> bool:
        """:meth:`log` at WARNING."""
        return self.log(logging.WARNING, fault, msg, *args, exc_info=exc_info)
