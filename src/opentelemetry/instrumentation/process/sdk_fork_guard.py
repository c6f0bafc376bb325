"""A guard for the OpenTelemetry SDK locks that a fork can leave held in the child.

This module touches private state of the SDK (``opentelemetry-sdk``), and
only that, every attribute feature-detected; it is kept apart so that it is
easy to review and to delete. Its at-fork hook takes each guarded provider's
collection lock, and the lock of each periodic reader's wait (at most
``FORK_WAIT_SECONDS`` each), before a fork, and replaces in the child a
collection lock the fork did not wait out: nothing later can, since a
collection waits for that lock before any callback runs. A held export lock
is replaced by :func:`after_fork`, from the child's first collection, after a
fork of either kind: no export can start before it. Why, what stays out
of reach, and the report for upstream: docs/sdk-fork.md.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any

_logger = logging.getLogger(__name__)

FORK_WAIT_SECONDS = 1.0
"""How long a fork waits for a collection in flight (a collection takes milliseconds)."""

_guarded: weakref.WeakSet[Any] = weakref.WeakSet()
_held: list[tuple[Any, Any]] = []  # (consumer, lock) taken in _before
_said_unsupported = False


def guard(provider: Any) -> None:
    """Keep ``provider``'s SDK locks consistent across ``os.fork()``."""
    _guarded.add(provider)


def unguard(provider: Any) -> None:
    """Stop guarding ``provider`` (after ``uninstrument()``)."""
    _guarded.discard(provider)


def _is_lock(lock: Any) -> bool:
    return all(callable(getattr(lock, name, None)) for name in ("acquire", "release", "locked"))


def _sdk_provider(provider: Any) -> Any:
    # The API's global provider may be a proxy that forwards to the real one.
    return getattr(provider, "_real_meter_provider", None) or provider


def _is_sdk_provider(provider: Any) -> bool:
    return type(provider).__module__.startswith("opentelemetry.sdk.")


def consumer_lock(provider: Any) -> tuple[Any, Any] | None:
    """``(consumer, lock)`` of an SDK provider's collections, or None where the SDK differs."""
    real = _sdk_provider(provider)
    consumer = getattr(real, "_measurement_consumer", None)
    lock = getattr(consumer, "_lock", None)
    if _is_lock(lock):
        return consumer, lock
    if _is_sdk_provider(real):
        _unsupported(real)
    return None


def _unsupported(provider: Any) -> None:
    global _said_unsupported
    if not _said_unsupported:
        _said_unsupported = True
        _logger.debug(
            "process metrics: %s has no measurement consumer lock where SDK 1.28-1.45 keep "
            "it; the fork guard does nothing for it.",
            type(provider).__name__,
        )


def readers(provider: Any) -> list[Any]:
    """The metric readers of an SDK provider, as far as they can be found."""
    real = _sdk_provider(provider)
    consumer = getattr(real, "_measurement_consumer", None)
    # Readers added after the provider was built are only in the storages;
    # older SDKs also list them in their configuration.
    found = list(getattr(consumer, "_reader_storages", None) or ())
    config = getattr(real, "_sdk_config", None)
    found += [r for r in getattr(config, "metric_readers", ()) if r not in found]
    return found


def wait_locks(provider: Any) -> list[Any]:
    """The lock of each periodic reader's wait between exports, where the SDK keeps one.

    The export thread holds it for a moment each time it wakes. A fork in that
    moment would leave it held in the child, whose new export thread (the SDK
    starts one there) would then wait for it forever: no export at all.
    """
    found = []
    for reader in readers(provider):
        cond = getattr(getattr(reader, "_shutdown_event", None), "_cond", None)
        lock = getattr(cond, "_lock", None)
        if _is_lock(lock):
            found.append(lock)
    return found


def _before() -> None:
    for provider in list(_guarded):
        found = consumer_lock(provider)
        if found is not None and found[1].acquire(timeout=FORK_WAIT_SECONDS):
            _held.append(found)
        # Taken after the collection lock, which the export thread never holds
        # while it holds one of these: no order of the two can deadlock.
        for lock in wait_locks(provider):
            if lock.acquire(timeout=FORK_WAIT_SECONDS):
                _held.append((None, lock))


def _after_in_parent() -> None:
    while _held:
        _, lock = _held.pop()
        lock.release()


def _after_in_child() -> None:
    _after_in_parent()  # releases every lock _before took: only this thread runs here
    for provider in list(_guarded):
        found = consumer_lock(provider)
        if found is not None and found[1].locked():
            # The fork did not wait it out: its holder does not exist here.
            found[0]._lock = threading.Lock()


def after_fork(provider: Any, hooked: bool) -> None:
    """Repair ``provider``'s export locks in a forked child; say so if the fork skipped the hooks.

    Called once, from inside the first collection of ``provider`` in the new
    process (the snapshot cache notices the new pid), whether or not the fork
    ran Python's at-fork hooks (``hooked``). No export of ``provider`` has run
    in this process yet (an export follows a collection, in the export thread
    that the SDK starts in the child as in ``force_flush()``), so an export
    lock that is held was held by a thread of the parent, and a fresh one
    replaces it. A fork without the hooks is said once: the SDK's export
    thread does not run there.
    """
    for reader in readers(provider):
        export_lock: Any = getattr(reader, "_export_lock", None)
        if _is_lock(export_lock) and export_lock.locked():
            reader._export_lock = threading.Lock()
    if hooked:
        return
    _logger.warning(
        "process metrics: process %d was forked without Python's at-fork hooks (uWSGI does "
        "this unless --py-call-osafterfork or --py-call-uwsgi-fork-hooks is given). Its "
        "process metrics are its own, but the SDK's periodic export thread does not run "
        "here and the resource still describes the parent: set up OpenTelemetry in each "
        "worker after the fork (see the pre-fork page of the documentation).",
        os.getpid(),
    )


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child
    )
