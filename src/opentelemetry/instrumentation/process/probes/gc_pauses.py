"""Garbage-collection pauses: timed by the interpreter where it can, else by a gc callback.

Two ways, chosen by what the interpreter offers, never by its version:

The interpreter's own timing
    Where ``gc.get_stats()`` reports a ``duration`` per generation (CPython
    3.15, gh-140638), the totals are read from it and no callback runs unless
    something needs each pause: the buckets (``histogram=True``) or the long
    pauses with what ran (``long_pause``); that callback times the pauses as
    on other interpreters (one callback, one cost, everywhere). Without a
    callback, the longest pause of a generation is known only when it
    collected at most once since the previous read; otherwise it is ``None``.

A callback of ours
    CPython calls every entry of ``gc.callbacks`` with ``("start", info)``
    before a collection and ``("stop", info)`` after it, in the thread that
    collects. Ours reads ``time.perf_counter()`` at both ends and adds the
    difference to running totals per generation.

The hot path
    The callback runs for every collection of every generation, thousands of
    times a second in an allocating program. It binds everything it touches as
    default arguments (local loads), builds no tuple, dict or closure, looks up
    no attribute and takes no lock. Counts are floats: they come from CPython's
    float free list, where an int above 256 would be a fresh allocation.

Signals
    A signal handler runs at the next check of the eval breaker in the main
    thread, and a gc callback is Python code: a Ctrl-C during a collection
    raises ``KeyboardInterrupt`` in the callback (from 3.11 at its first
    instruction, before any ``try``), and CPython then prints it as ignored
    and drops it (gh-95959 for weakref callbacks). The program would not stop.
    So whatever a handler raised in our callback is handed back, to be raised
    at the program's next bytecode as if we had not been there (``_armed``):
    the callback catches it, and a ``sys.unraisablehook`` of ours, chained to
    the one before it while a callback runs, catches what escaped before the
    ``try``. One raised as a collection starts is handed back when it stops:
    finalizers run in between, and would drop it too.

Re-entrancy
    CPython runs one collection at a time per interpreter, but 3.12 can nest a
    collection scheduled earlier inside a gc callback (seen on 3.12.1). The
    callback keeps a small stack of start times indexed by depth, reads the
    start time before calling the clock (the only call at which a nested
    collection can run), and ignores a ``stop`` that has no ``start`` (a
    callback installed mid-collection).

The longest pause, without a lock
    A read takes and zeroes each generation's maximum with no call or jump
    between the load and the store, where a thread could switch: with a GIL,
    no collection ends in between. Without one (a free-threaded build), a
    pause of another thread ending in those two instructions is lost from the
    maximum (never from the totals), a race no lock is worth: a lock there is
    one a fork can copy held.

The histogram
    OpenTelemetry has no asynchronous histogram, and the callback must never
    record into a synchronous one: a collection can start while the same
    thread holds the SDK's aggregation lock, and recording from the callback
    would then wait for that lock forever (``tests/test_gc_pauses`` shows
    it). With ``histogram=True`` the callback counts pauses into fixed
    buckets (:data:`BOUNDS`), cumulative.

Long pauses
    With ``long_pause`` set, a pause at least that long is kept with
    ``capture()``'s result, called in the thread that collected (by default a
    copy of its ``contextvars`` context: what was running, O(1)). At most
    :data:`MAX_LONG` are kept between two reads.

Forks
    A forked child starts its own totals when its snapshot source calls
    :meth:`GcPauses.reset` (with or without Python's at-fork hooks). Nothing
    here holds a lock a fork could copy held.

Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

import _thread
import bisect
import collections
import contextvars
import functools
import gc
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from ..excerpt import excerpt

# Generations: CPython reports info["generation"] as an index into its own
# per-generation stats, whose length is that of gc.get_stats().
GENERATIONS = len(gc.get_stats())

TIMED_BY_INTERPRETER = "duration" in gc.get_stats()[0]
"""Whether this interpreter times its own collections (``gc.get_stats()`` has ``duration``)."""

# Nesting depth with a start time of its own (3.12 can nest one collection in
# another); deeper levels are still paired, but not timed.
DEPTH = 4

MAX_LONG = 16
"""Long pauses kept between two reads; later ones are counted in the totals only."""

# Upper bounds (seconds) of the pause buckets: the 1-2-5 series from 10 µs to
# 1 s. A generation-0 pause of a small heap takes tens of µs and a full
# collection of a large one 10 ms to 1 s; neighbouring bounds differ by at
# most 2.5x, and the values read as they are written (le="0.005").
BOUNDS: tuple[float, ...] = (
    0.00001, 0.00002, 0.00005,
    0.0001, 0.0002, 0.0005,
    0.001, 0.002, 0.005,
    0.01, 0.02, 0.05,
    0.1, 0.2, 0.5,
    1.0,
)  # fmt: skip

# Aliases as strings: no alias object made at import (linux/files.py says why).
GcCallback: TypeAlias = "Callable[[str, dict[str, Any]], None]"
_Histogram: TypeAlias = (
    "tuple[list[list[float]], Callable[[Sequence[float], float], int], tuple[float, ...]]"
)
_Rare: TypeAlias = "tuple[list[list[LongPause]], Callable[[], Any], list[BaseException]]"

PENDING = -(1 << 30)
"""The depth that marks a signal's exception raised as a collection started: its stop hands it
back (the stop finds no start, as when installed mid-collection)."""


class LongPause:
    """One pause of at least ``long_pause`` seconds."""

    __slots__ = ("captured", "generation", "seconds")

    def __init__(self, seconds: float, generation: int, captured: Any) -> None:
        self.seconds = seconds
        self.generation = generation
        self.captured = captured
        """What ``capture()`` returned in the thread that collected."""


class GcPauseReading:
    """Totals since :meth:`GcPauses.start` (or the last reset), by generation.

    ``seconds`` and ``pauses`` are cumulative. ``longest`` is the longest pause
    of each generation since the previous :meth:`GcPauses.read`: 0.0 if that
    generation did not collect since, ``None`` if it is not known (timed by the
    interpreter, no callback, more than one collection). ``buckets`` holds, per
    generation, cumulative pause counts for each bucket of :data:`BOUNDS` plus
    one above the last bound, or is ``None`` unless the recorder was made with
    ``histogram=True``. ``long`` holds the long pauses since the previous read.
    """

    __slots__ = ("buckets", "long", "longest", "pauses", "seconds")

    def __init__(
        self,
        seconds: tuple[float, ...],
        pauses: tuple[int, ...],
        longest: tuple[float | None, ...],
        buckets: tuple[tuple[int, ...], ...] | None = None,
        long: tuple[LongPause, ...] = (),
    ) -> None:
        self.seconds = seconds
        self.pauses = pauses
        """Collections of each generation since the start, as ``gc.get_stats()`` counts them."""
        self.longest = longest
        self.buckets = buckets
        self.long = long


class _State:
    """What the callback writes: lists made once, changed in place (the callback holds them)."""

    __slots__ = ("buckets", "depth", "long", "peak", "pending", "starts", "total")

    def __init__(self) -> None:
        self.depth = [0]
        """Collections started and not stopped (the callback saw their start)."""
        self.pending: list[BaseException] = []
        """Raised by a signal handler as a collection started: handed back when it stops."""
        self.starts = [0.0] * DEPTH
        self.total = [0.0] * GENERATIONS
        self.peak = [0.0] * GENERATIONS
        self.buckets = [[0.0] * (len(BOUNDS) + 1) for _ in range(GENERATIONS)]
        self.long: list[list[LongPause]] = [[]]
        """The long pauses since the previous read (the inner list is replaced by a read)."""


def _callback(
    state: _State,
    buckets: list[list[float]] | None,
    long_pause: float,
    capture: Callable[[], Any],
) -> GcCallback:
    """The ``gc.callbacks`` entry: times each collection; buckets and long pauses if asked.

    The state comes in as default arguments, read as fast locals on each call;
    what only a rare branch reads comes in one tuple (each default costs a
    little at every call).
    """
    hist = None if buckets is None else (buckets, bisect.bisect_left, BOUNDS)

    def on_gc(
        phase: str,
        info: dict[str, Any],
        _clock: Callable[[], float] = time.perf_counter,
        _depth: list[int] = state.depth,
        _starts: list[float] = state.starts,
        _total: list[float] = state.total,
        _peak: list[float] = state.peak,
        _hist: _Histogram | None = hist,
        _slots: int = DEPTH,
        _long_pause: float = long_pause,
        _rare: _Rare = (state.long, capture, state.pending),
    ) -> None:
        try:
            if phase == "start":
                i = _depth[0]
                _depth[0] = i + 1  # before the clock call: a nested collection takes i + 1
                if i < _slots:
                    _starts[i] = _clock()
                return
            i = _depth[0] - 1
            if i < 0:  # no start seen: installed mid-collection, or a signal at the start
                _depth[0] = 0
                pending = _rare[2]
                if pending:
                    armed = _armed(pending.pop())
                    if armed is not None:
                        armed[0]  # the last bytecode that can run a handler: see _armed
                return
            _depth[0] = i
            if i >= _slots:
                return
            began = _starts[i]  # before the clock call: a nested collection reuses slot i
            elapsed = _clock() - began
            g = info["generation"]
            _total[g] += elapsed  # counted by CPython itself (gc.get_stats())
            if elapsed > _peak[g]:  # pragma: no mutate - ">=" stores the same value
                _peak[g] = elapsed
            if _hist is not None:
                # bisect_left: a pause equal to a bound counts in that bound's bucket,
                # as OpenTelemetry's explicit buckets (upper bound inclusive) do.
                _hist[0][g][_hist[1](_hist[2], elapsed)] += 1.0
            if elapsed >= _long_pause:
                kept = _rare[0][0]
                if len(kept) < MAX_LONG:
                    kept.append(LongPause(elapsed, g, _captured(_rare[1])))
        except BaseException as exc:  # a signal handler's: not ours to keep
            if phase == "start":
                _rare[2].append(exc)  # finalizers run before the stop, and would drop it
                _depth[0] = PENDING
                return
            armed = _armed(exc)
            if armed is None:
                raise  # to the unraisable hooks, as without us
            armed[0]

    return on_gc


_CALLBACK_CODE = _callback(_State(), None, 0.0, contextvars.copy_context).__code__
"""The code of every callback of ours (each a closure of the same function)."""


class GcPauses:
    """Running totals of garbage-collection pauses.

    ``start()`` installs the callback where one is needed; ``stop()`` removes
    it; ``read()`` returns the totals; ``reset()`` zeroes them.

    ``long_pause``: seconds from which a pause is kept with ``capture()``'s
    result (``None``: none kept). ``capture`` defaults to
    ``contextvars.copy_context``.
    """

    def __init__(
        self,
        *,
        histogram: bool = False,
        long_pause: float | None = None,
        capture: Callable[[], Any] = contextvars.copy_context,
    ) -> None:
        if not isinstance(histogram, bool):
            raise ValueError(
                f"histogram must be True or False, not {type(histogram).__name__} "
                f"{excerpt(histogram, 40)}"
            )
        if long_pause is not None and (
            isinstance(long_pause, bool)
            or not isinstance(long_pause, (int, float))
            or not long_pause > 0
        ):
            raise ValueError(
                "long_pause must be a number of seconds above 0, or None; "
                f"got {excerpt(long_pause, 40)}"
            )
        self.histogram = histogram
        self.hooked = not TIMED_BY_INTERPRETER or histogram or long_pause is not None
        """Whether a callback times the pauses (else ``gc.get_stats()`` alone is read)."""
        self._long_pause = float("inf") if long_pause is None else float(long_pause)
        self._capture = capture
        self._state = _State()
        self._tops = [0.0] * GENERATIONS
        self._base = _interpreter_totals()
        """Interpreter-timed: ``gc.get_stats()``'s totals at the start, and at the last read."""
        self._last = self._base
        self._callback = self._made()
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def _made(self) -> GcCallback:
        buckets = self._state.buckets if self.histogram else None
        return _callback(self._state, buckets, self._long_pause, self._capture)

    def keep_long(self, seconds: float) -> None:
        """Keep the pauses of at least ``seconds`` from now (with what ``capture`` returns).

        Timed by the interpreter without a callback, a pause is known alone only
        when its generation collected once since the previous read; it is kept
        then, with nothing captured. The threshold is bound into the callback
        (a fast local): a running one is replaced.
        """
        self._long_pause = float(seconds)
        running = self.running
        if running:
            self.stop()
        if self._finalizer is not None:  # it holds the old callback: a new one at start()
            self._finalizer.detach()
            self._finalizer = None
        self._callback = self._made()
        if running:
            self.start()

    @staticmethod
    def available() -> bool:
        """Whether this runtime has ``gc.callbacks``, or times its collections."""
        return TIMED_BY_INTERPRETER or isinstance(getattr(gc, "callbacks", None), list)

    @property
    def running(self) -> bool:
        """Whether our callback is in ``gc.callbacks``."""
        return _holds(self._callback)

    def start(self) -> bool:
        """Install the callback where one is needed; False (and nothing done) if it cannot run."""
        if not self.available():
            return False
        if not self.hooked or _holds(self._callback):
            return True
        if not isinstance(getattr(gc, "callbacks", None), list):
            return False
        self._state.depth[0] = 0  # a start left behind by an earlier stop() mid-collection
        _installed.append((self._callback, self._state))
        _chain_unraisable()
        gc.callbacks.append(self._callback)
        if self._finalizer is None:
            # A recorder dropped without stop() takes its callback with it.
            self._finalizer = weakref.finalize(self, _uninstall, self._callback)
        return True

    def stop(self) -> None:
        """Remove the callback, wherever it now is in ``gc.callbacks``; its totals freeze (the
        count of collections is CPython's own, and goes on)."""
        _uninstall(self._callback)

    def reset(self) -> None:
        """Zero every total, and forget a collection in flight (a forked child, say)."""
        state = self._state
        state.depth[0] = 0
        for values in (state.total, state.peak, *state.buckets):
            values[:] = [0.0] * len(values)  # in place: the callback holds the lists
        state.long[0] = []
        self._base = self._last = _interpreter_totals()

    def read(self) -> GcPauseReading:
        """The totals, and the longest pause per generation since the previous read."""
        state = self._state
        long = state.long[0]
        state.long[0] = []
        if not self.hooked:
            return self._read_interpreter()
        # Take and zero each maximum: no call or jump between the load and the
        # store, so with a GIL no collection of any thread ends in between.
        peak, tops = state.peak, self._tops
        for g in range(GENERATIONS):
            tops[g] = peak[g]
            peak[g] = 0.0
        # The pauses are CPython's own count of collections since the start;
        # nothing else of this reading needs it, so a failure of it costs only it.
        try:
            _, counts = _interpreter_totals()
        except Exception:  # noqa: BLE001 - gc.get_stats() has never failed; the count waits
            counts = self._last[1]
        self._last = (self._last[0], counts)
        return GcPauseReading(
            seconds=tuple(state.total),
            pauses=tuple(n - b for n, b in zip(counts, self._base[1], strict=True)),
            # A generation that collected since the last read paused for its
            # maximum (a pause takes time); one that did not, for 0.0.
            longest=tuple(tops),
            buckets=(
                tuple(tuple(int(x) for x in row) for row in state.buckets)
                if self.histogram
                else None
            ),
            long=tuple(long),
        )

    def _read_interpreter(self) -> GcPauseReading:
        seconds, counts = _interpreter_totals()
        base_s, base_n = self._base
        last_s, last_n = self._last
        self._last = (seconds, counts)
        longest: list[float | None] = []
        long: list[LongPause] = []
        for g in range(GENERATIONS):
            collected = counts[g] - last_n[g]
            # One collection since the last read: its duration is the longest.
            alone = seconds[g] - last_s[g] if collected == 1 else None
            longest.append(0.0 if collected == 0 else alone)
            if alone is not None and alone >= self._long_pause:
                long.append(LongPause(alone, g, None))
        return GcPauseReading(
            seconds=tuple(s - b for s, b in zip(seconds, base_s, strict=True)),
            pauses=tuple(n - b for n, b in zip(counts, base_n, strict=True)),
            longest=tuple(longest),
            long=tuple(long),
        )


def _interpreter_totals() -> tuple[tuple[float, ...], tuple[int, ...]]:
    """``gc.get_stats()``'s duration and collections per generation (durations 0.0 if not timed)."""
    stats = gc.get_stats()
    return (
        tuple(float(s.get("duration", 0.0)) for s in stats),
        tuple(int(s["collections"]) for s in stats),
    )


_installed: list[tuple[GcCallback, _State]] = []
"""Our callbacks in ``gc.callbacks`` and their state: what escapes them is handed back."""

_previous_hook: list[Callable[[Any], Any]] = []
"""The ``sys.unraisablehook`` ours was chained to, while it is installed."""


def _holds(callback: GcCallback) -> bool:
    callbacks = getattr(gc, "callbacks", None)
    return isinstance(callbacks, list) and any(x is callback for x in callbacks)


def _uninstall(callback: GcCallback) -> None:
    # By identity, from wherever others have moved it; every copy.
    callbacks = getattr(gc, "callbacks", None)
    if isinstance(callbacks, list):
        for i in range(len(callbacks) - 1, -1, -1):
            if callbacks[i] is callback:
                del callbacks[i]
    _installed[:] = [entry for entry in _installed if entry[0] is not callback]
    if not _installed:
        _unchain_unraisable()


def _captured(capture: Callable[[], Any]) -> Any:
    """What ``capture()`` returns, or ``None`` if it fails: its fault is not the program's."""
    try:
        return capture()
    except Exception:  # noqa: BLE001 - a capture's own fault; a signal's BaseException goes on
        return None


def _ours(unraisable: Any) -> _State | None:
    """The state of our callback that ``unraisable`` escaped from, or ``None``.

    Told by the object CPython names, or, from 3.14, where it names none
    (``PyErr_FormatUnraisable``), by the callback's frame in the traceback.
    """
    for callback, state in _installed:
        if callback is unraisable.object:
            return state
    tb = unraisable.exc_traceback
    while tb is not None:
        if tb.tb_frame.f_code is _CALLBACK_CODE:
            for _callback_of_state, state in _installed:
                if tb.tb_frame.f_locals.get("_depth") is state.depth:
                    return state
        tb = tb.tb_next
    return None


# No mutmut trampoline (its frames would run after the hand-back's last bytecode).
def _unraisable(unraisable: Any) -> None:  # pragma: no mutate block
    """``sys.unraisablehook`` while a callback of ours runs: what a signal raised in it goes back.

    Raised before our callback's first line: at a stop (its start was seen),
    it goes back now; at a start, when that collection stops.
    """
    exc = unraisable.exc_value
    state = _ours(unraisable)
    if state is not None and exc is not None:
        if state.depth[0] <= 0:
            state.pending.append(exc)
            state.depth[0] = PENDING  # its stop finds no start, and hands it back
            return
        state.depth[0] -= 1  # that stop was not seen: it is now
        armed = _armed(exc)
        if armed is not None:
            armed[0]  # the last bytecode that can run a handler: see _armed
            return
    previous = _previous_hook[0] if _previous_hook else sys.__unraisablehook__
    if previous is _unraisable or getattr(_passing, "on", False):
        previous = sys.__unraisablehook__  # a hook chained to ours that we chained to
    _passing.on = True
    try:
        previous(unraisable)
    finally:
        _passing.on = False


_passing = threading.local()
"""``on`` while this thread's ``_unraisable`` hands an exception on: a loop back ends there."""


def _chain_unraisable() -> None:
    """Installs ours, chained to the hook in place; again if another replaced ours since."""
    current = sys.unraisablehook
    if current is _unraisable:
        return
    _previous_hook[:] = [current]
    sys.unraisablehook = _unraisable


def _unchain_unraisable() -> None:
    if _previous_hook:
        previous = _previous_hook.pop()
        if sys.unraisablehook is _unraisable:  # replaced since: theirs stays
            sys.unraisablehook = previous


def _armed(exc: BaseException) -> Any:
    """A mapping whose first lookup raises ``exc`` again in this thread at its next bytecode.

    A signal handler (Ctrl-C's, or one calling ``sys.exit()``) raised ``exc``
    in our gc callback, where CPython would print and drop it. It must be
    raised once the collection is over, in the code that allocated, as if we
    had not been there. Raising it, or asking for it, from Python code of
    ours would raise it right there: the next call of ours runs pending
    handlers. So the request is made in C, by a lookup of a missing key in a
    ``defaultdict`` (a subscript runs no handler afterwards), which the caller
    makes as its last statement: its factory simulates a SIGINT, whose
    handler, borrowed until it runs once, raises ``exc`` itself. Handlers run
    only in the main thread; anywhere else (an exception another thread sent
    with ``PyThreadState_SetAsyncExc``) ``None``: it cannot be handed back.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGINT)

    def once(_signum: int, _frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
        raise exc

    try:
        signal.signal(signal.SIGINT, once)
    except ValueError:  # not the main interpreter
        return None
    return collections.defaultdict(functools.partial(_thread.interrupt_main, signal.SIGINT))


__all__ = ["BOUNDS", "GENERATIONS", "GcPauseReading", "GcPauses", "LongPause"]
