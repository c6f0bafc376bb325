"""Waiting for a condition with a deadline, for what the OS or a thread does in its own time."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(check: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02) -> bool:
    """Whether ``check()`` became true within ``timeout`` seconds, tried every ``interval``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True
