"""Fork safety for the SDK locks that our metrics go through.

The SDK holds one lock per meter provider (its measurement consumer's) across
every observable callback of a collection, and does not re-create it in a
forked child (open-telemetry/opentelemetry-python#4345). A fork while the
export thread collects would leave every collection in the child waiting
forever. As the logging module does for its own locks, we take that lock
before a fork, so no collection is in flight, and release it on both sides.

A periodic reader's export lock can also be held by an export in flight.
Exports can take seconds, so a fork does not wait for them: the child gets a
fresh lock instead, because the thread holding the old one does not exist
there.

Only providers with a live instrumentation are guarded; a process that never
forks pays nothing.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

# How long a fork waits for a collection in flight. A collection takes
# milliseconds; this only bounds the wait when a fork happens inside one.
FORK_WAIT_SECONDS = 1.0

_guarded: weakref.WeakSet[Any] = weakref.WeakSet()
_held: list[tuple[Any, Any]] = []  # (consumer, lock) taken in _before


def guard(provider: Any) -> None:
    """Keep ``provider``'s collection lock consistent across ``os.fork()``."""
    _guarded.add(provider)


def unguard(provider: Any) -> None:
    """Stop guarding ``provider`` (after ``uninstrument()``)."""
    _guarded.discard(provider)


def _sdk_provider(provider: Any) -> Any:
    # The global provider may be a proxy that forwards to the real one.
    return getattr(provider, "_real_meter_provider", None) or provider


def _consumer(provider: Any) -> Any:
    return getattr(_sdk_provider(provider), "_measurement_consumer", None)


def _readers(provider: Any, consumer: Any) -> list[Any]:
    # Readers added after the provider was built are only in the storages;
    # older SDKs also list them in their configuration.
    readers = list(getattr(consumer, "_reader_storages", None) or ())
    config = getattr(_sdk_provider(provider), "_sdk_config", None)
    readers += [r for r in getattr(config, "metric_readers", ()) if r not in readers]
    return readers


def _is_lock(lock: Any) -> bool:
    return callable(getattr(lock, "acquire", None)) and callable(getattr(lock, "release", None))


def _locked(lock: Any) -> bool:
    locked = getattr(lock, "locked", None)
    return bool(locked()) if callable(locked) else False


def _before() -> None:
    for provider in list(_guarded):
        consumer = _consumer(provider)
        lock: Any = getattr(consumer, "_lock", None)
        if _is_lock(lock) and lock.acquire(timeout=FORK_WAIT_SECONDS):
            _held.append((consumer, lock))


def _after_in_parent() -> None:
    while _held:
        _, lock = _held.pop()
        lock.release()


def _after_in_child() -> None:
    taken = {id(consumer) for consumer, _lock in _held}
    _after_in_parent()
    for provider in list(_guarded):
        consumer = _consumer(provider)
        lock = getattr(consumer, "_lock", None)
        if id(consumer) not in taken and _locked(lock):
            # The fork did not wait it out: its holder does not exist here.
            consumer._lock = threading.Lock()
        for reader in _readers(provider, consumer):
            export_lock = getattr(reader, "_export_lock", None)
            if _locked(export_lock):
                reader._export_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child
    )
