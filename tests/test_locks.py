"""A lock of the process that takes it, across forks with and without Python's at-fork hooks."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from opentelemetry.instrumentation.process.locks import ProcessLock

from .support.forked import c_fork, held_by_another_thread, in_child

FORKS = [pytest.param(os.fork, id="fork")]
if sys.platform == "linux":  # a fork from C beside a parked thread
    FORKS.append(pytest.param(c_fork, id="cfork"))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
@pytest.mark.parametrize("fork", FORKS)
def test_a_lock_held_by_a_thread_at_the_fork_is_not_the_childs(fork: Callable[[], int]) -> None:
    lock = ProcessLock()
    parents = lock.get()

    def child() -> dict[str, Any]:
        mine: list[threading.Lock] = []
        racers = [threading.Thread(target=lambda: mine.append(lock.get())) for _ in range(4)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(5)
        acquired = mine[0].acquire(timeout=2)
        return {
            "acquired": acquired,
            "one": len({id(m) for m in mine}) == 1 and len(mine) == 4,
            "not_the_parents": all(m is not parents for m in mine),
            "kept": list(lock._locks) == [os.getpid()],
        }

    with held_by_another_thread(lock.get()):  # a thread of the parent inside the lock
        got = in_child(child, timeout=10, fork=fork)
    assert got == {"acquired": True, "one": True, "not_the_parents": True, "kept": True}
    assert lock.get() is parents  # never replaced in its own process
