"""Waiting for a condition with a deadline, for what the OS or a thread does in its own time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

S = TypeVar("S")
T = TypeVar("T")


def eventually(check: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02) -> bool:
    """Whether ``check()`` became true within ``timeout`` seconds, tried every ``interval``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def while_still(side: Callable[[], S], action: Callable[[], T], rounds: int = 5) -> tuple[T, S, S]:
    """``action()``, with ``side()`` read before and after it: from the first round in which
    ``side()`` held still, or the last of ``rounds``.

    For a value compared with another read of the process or the host that can move
    meanwhile (a thread of an earlier test on its way out, pages swapped out).
    """
    for _ in range(rounds):
        before = side()
        got = action()
        after = side()
        if before == after:
            break
    return got, before, after
