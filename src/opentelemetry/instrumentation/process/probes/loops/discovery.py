"""Finding event loops: a hook on loop start and stop, and loops handed over by ``watch_loop``.

Every loop calls ``asyncio._set_running_loop(loop)`` when it starts running
and ``_set_running_loop(None)`` when it stops; the hook wraps that function,
the one private asyncio API this package touches. See docs/runtime.md.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

SetRunningLoop = Callable[[Any], None]


class Watcher(Protocol):
    """What the hooks call; a hook never lets a watcher's exception through."""

    def loop_started(self, loop: Any) -> None:
        """``loop`` runs in the calling thread (it starts, or runs already)."""

    def loop_stopped(self, loop: Any) -> None:
        """``loop`` stops running in the calling thread."""

    def loop_running(self, loop: Any) -> None:
        """``loop`` was running in another thread when handed over."""


class Hooks:
    """The process-wide hooks, installed while at least one watcher is subscribed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.watchers: tuple[weakref.ref[Watcher], ...] = ()
        # (owner, attribute, original, wrapper) for each hook installed
        self.installed: list[tuple[Any, str, Any, Any]] = []
        self.watched: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        """Loops handed over by ``watch_loop``: every watcher subscribed later gets them too."""

    def add(self, watcher: Watcher) -> None:
        """Subscribe ``watcher``; it gets the caller's running loop and the watched ones."""
        with self._locked():
            self.watchers = (*self._live(), weakref.ref(watcher))
            if not self.installed:
                self._install()
            watched = list(self.watched)
        own = asyncio.events._get_running_loop()
        if own is not None:
            self._call(watcher.loop_started, own)
        for loop in watched:
            if loop is not own:
                self._hand_over(watcher, loop)

    def discard(self, watcher: Watcher) -> None:
        with self._locked():
            self.watchers = tuple(r for r in self._live() if r() is not watcher)
            if not self.watchers:
                self._uninstall()

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand ``loop`` to every watcher now and to those subscribed later."""
        with self._locked():
            self.watched.add(loop)
        own = asyncio.events._get_running_loop()
        for ref in self.watchers:
            watcher = ref()
            if watcher is None:
                continue
            if loop is own:
                self._call(watcher.loop_started, loop)
            else:
                self._hand_over(watcher, loop)

    def _hand_over(self, watcher: Watcher, loop: asyncio.AbstractEventLoop) -> None:
        # A loop that does not run now is seen by the hook when it starts.
        with contextlib.suppress(Exception):
            if loop.is_running():
                watcher.loop_running(loop)

    def _locked(self) -> threading.Lock:
        """The lock, renewed in a forked child, with or without Python's at-fork hooks.

        The hooks' one fork mechanism. There the old lock may be held by a
        thread of the parent, which the child does not have: it would never
        be released. The parent's watched loops are not the child's.
        """
        if self.pid != os.getpid():
            self.pid = os.getpid()
            self.lock = threading.Lock()
            self.watched = weakref.WeakSet()
        return self.lock

    def _live(self) -> tuple[weakref.ref[Watcher], ...]:
        return tuple(r for r in self.watchers if r() is not None)

    @staticmethod
    def _call(method: Callable[[Any], None], loop: Any) -> None:
        with contextlib.suppress(Exception):  # never break a loop's start or stop
            method(loop)

    def started(self, loop: Any) -> None:
        for ref in self.watchers:
            watcher = ref()
            if watcher is not None:
                self._call(watcher.loop_started, loop)

    def stopped(self, loop: Any) -> None:
        for ref in self.watchers:
            watcher = ref()
            if watcher is not None:
                self._call(watcher.loop_stopped, loop)

    def _install(self) -> None:
        for module in (asyncio.events, asyncio):
            original = getattr(module, "_set_running_loop")  # noqa: B009 - private, untyped in asyncio
            wrapper = self._wrap_set_running_loop(original)
            setattr(module, "_set_running_loop", wrapper)  # noqa: B010
            self.installed.append((module, "_set_running_loop", original, wrapper))

    def _uninstall(self) -> None:
        while self.installed:
            owner, name, original, wrapper = self.installed.pop()
            if owner.__dict__.get(name) is not wrapper:
                continue  # wrapped again by someone else: ours stays, as a pass-through
            setattr(owner, name, original)

    def _wrap_set_running_loop(self, original: SetRunningLoop) -> SetRunningLoop:
        get_running_loop = asyncio.events._get_running_loop

        def _set_running_loop(loop: Any) -> None:
            if loop is None:
                running = get_running_loop() if self.watchers else None
                original(None)
                if running is not None:
                    self.stopped(running)
            else:
                original(loop)
                if self.watchers:
                    self.started(loop)

        _set_running_loop.__wrapped__ = original  # type: ignore[attr-defined]
        return _set_running_loop


hooks = Hooks()
