"""What every source shares: the read context's bookkeeping, checked with plain numbers."""

from __future__ import annotations

import ast
import errno
import functools
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil
import pytest

from opentelemetry.instrumentation.process import ProcessMetricsOptions
from opentelemetry.instrumentation.process.facts import read_facts
from opentelemetry.instrumentation.process.faultlog import FaultLog
from opentelemetry.instrumentation.process.snapshot import SnapshotCache
from opentelemetry.instrumentation.process.sources import SOURCES
from opentelemetry.instrumentation.process.sources.base import (
    MIN_UTILIZATION_WINDOW,
    Delta,
    Key,
    ReadContext,
    Reading,
    State,
    attributes,
)
from opentelemetry.instrumentation.process.sources.process import THREAD_COUNT

from .conftest import LogLines
from .support.waiting import while_still


@pytest.fixture
def lines() -> LogLines:
    handler = LogLines()
    logger = logging.getLogger("tests.sources_base")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return handler


def _context(faults: FaultLog, *, direct: bool = True) -> ReadContext:
    process = psutil.Process()
    facts = read_facts(process, cpu_frequency=False)
    return ReadContext(
        process=process,
        facts=facts,
        options=ProcessMetricsOptions(),
        faults=faults,
        direct=direct,
    )


def test_a_failed_direct_read_is_given_up_alone_and_said_once_per_fault(lines: LogLines) -> None:
    faults = FaultLog(logger=logging.getLogger("tests.sources_base"))
    ctx = _context(faults)
    assert ctx.use_direct("threads") and ctx.use_direct("sockets")
    ctx.direct_failed_once("threads", OSError(5, "Input/output error"))
    assert not ctx.use_direct("threads")
    assert ctx.use_direct("sockets")  # only the read that failed is given up
    assert lines.lines == [
        "WARNING process metrics: the direct Linux read 'threads' failed (OSError: "
        "[Errno 5] Input/output error); psutil is used instead from now on."
    ]
    # After a fork the new context tries again, with the same fault log: the same
    # fault is not said twice in a period, another one is.
    again = _context(faults)
    assert again.use_direct("threads")
    again.direct_failed_once("threads", OSError(5, "Input/output error"))
    again.direct_failed_once("threads", PermissionError(13, "Permission denied"))
    assert len(lines.lines) == 2
    assert "'threads' failed (PermissionError: [Errno 13] Permission denied)" in lines.lines[1]


@pytest.mark.parametrize("code", [errno.EBADF, errno.ENOTSOCK])
def test_a_read_whose_descriptor_another_thread_took_is_made_again_not_given_up(
    lines: LogLines, code: int
) -> None:
    """CPython's test_subprocess moves descriptors with dup2 while a read of ours holds one."""
    ctx = _context(FaultLog(logger=logging.getLogger("tests.sources_base")))
    failures = [code]

    def read() -> int:
        if failures:
            raise OSError(failures.pop(), os.strerror(code))
        return 7

    assert ctx.direct_read("threads", read) == 7  # made again at once
    failures[:] = [code, code]
    assert ctx.direct_read("threads", read) is None  # raced twice: psutil, this time only
    assert ctx.use_direct("threads")
    assert ctx.direct_read("threads", read) == 7
    assert lines.lines == []  # nothing of the read's own is wrong: nothing said


def test_direct_reads_off_are_never_tried() -> None:
    ctx = _context(FaultLog(), direct=False)
    assert not ctx.use_direct("threads")


def test_a_key_type_names_its_attributes_and_its_keys_are_plain_tuples() -> None:
    mode = attributes("cpu.mode", "cpu.logical_number")
    key = mode(("user", 0))
    assert mode.names == ("cpu.mode", "cpu.logical_number")
    assert key == ("user", 0) and hash(key) == hash(("user", 0))
    # A tuple's size: a reading holds one key per point, so no __dict__ each.
    assert not hasattr(key, "__dict__")


def test_a_counter_never_goes_down_and_a_new_key_starts_where_it_is() -> None:
    ctx = _context(FaultLog())
    assert ctx.never_below_previous("x", {("a",): 1.0}) == {("a",): 1.0}
    # a went back (iowait does): held at its floor; b is new: taken as it is.
    assert ctx.never_below_previous("x", {("a",): 0.5, ("b",): 3.0}) == {("a",): 1.0, ("b",): 3.0}
    assert ctx.never_below_previous("x", {("a",): 2.0, ("b",): 2.0}) == {("a",): 2.0, ("b",): 3.0}
    assert ctx.never_below_previous("y", {("a",): 0.0}) == {("a",): 0.0}  # floors are per name


def _per_second(deltas: Mapping[Key, float], elapsed: float) -> dict[Key, float]:
    return {k: v / elapsed for k, v in deltas.items()}


def test_a_delta_is_the_change_over_the_elapsed_time_and_reused_within_the_window() -> None:
    delta = Delta()
    window = MIN_UTILIZATION_WINDOW
    assert window == 0.1
    assert delta.step(-1.0, {("a",): 10.0}, _per_second) is None  # the baseline
    assert delta.step(0.0, {("a",): 12.0}, _per_second) == {("a",): 2.0}
    # Within the window: the last value again, and the baseline is kept.
    assert delta.step(0.05, {("a",): 99.0}, _per_second) == {("a",): 2.0}
    # Exactly one window later: a new value, from the kept baseline.
    assert delta.step(window, {("a",): 12.5}, _per_second) == {("a",): 0.5 / window}
    # A counter that went down counts as no change, never as negative.
    assert delta.step(1.0, {("a",): 11.0}, _per_second) == {("a",): 0.0}


def test_no_time_elapsed_gives_no_ratio_rather_than_a_division_by_zero() -> None:
    delta = Delta()
    assert delta.step(5.0, {("a",): 1.0}, _per_second) is None
    assert delta.step(5.0, {("a",): 2.0}, _per_second) is None
    assert delta.step(6.0, {("a",): 4.0}, _per_second) == {("a",): 2.0}  # from the second


# --- each source's own state, and what it needs from the others


def test_a_state_is_made_once_per_context_and_dropped_on_demand() -> None:
    made: list[ReadContext] = []

    def make(ctx: ReadContext) -> list[int]:
        made.append(ctx)
        return []

    state = State("test.source", make)
    ctx = _context(FaultLog())
    kept = ctx.state_of(state)
    kept.append(1)
    assert ctx.state_of(state) is kept and made == [ctx]
    assert ctx.state == {"test.source": [1]}  # by the source's name
    other = _context(FaultLog())  # another process, say: its own state
    assert other.state_of(state) == [] and made == [ctx, other]
    assert ctx.drop(state) is kept and ctx.drop(state) is None
    assert ctx.state == {}


def test_every_need_is_a_source_read_earlier_in_the_same_refresh() -> None:
    order = list(SOURCES)
    needy = [s for s in SOURCES.values() if s.needs]
    assert needy, "no source needs another: nothing to check"
    for source in needy:
        for name in source.needs:
            needed = SOURCES[name]
            assert order.index(name) < order.index(source.name), (source.name, name)
            # The oneshot's sources are read first: a need of one is one of them.
            assert needed.in_process or not source.in_process, (source.name, name)


def _num_threads(readings: dict[str, dict[str, int]]) -> int:
    ctx = _context(FaultLog())
    ctx.readings = readings
    count = SOURCES["process_num_threads"].read(ctx)["count"]
    assert isinstance(count, int)
    return count


def test_the_thread_count_comes_from_what_it_needs_when_they_were_read() -> None:
    # Counts no process has here: taken from the readings, not from psutil.
    listed, status = {THREAD_COUNT: 10_001}, {THREAD_COUNT: 10_002}
    assert _num_threads({"process_threads": listed, "process_signals": status}) == 10_001
    assert _num_threads({"process_signals": status}) == 10_002
    for readings in ({"process_signals": {"count": 0}}, {}):
        # psutil's count on either side, until no thread started or ended meanwhile.
        got, before, after = while_still(
            psutil.Process().num_threads, functools.partial(_num_threads, readings)
        )
        assert got == before == after, readings


def test_a_refresh_gives_the_thread_count_of_its_own_per_thread_read() -> None:
    cache = SnapshotCache(
        ProcessMetricsOptions(per_thread=True), ["process_threads", "process_num_threads"]
    )
    try:
        readings = cache.snapshot().readings
        assert readings["process_num_threads"]["count"] == readings["process_threads"][THREAD_COUNT]
        assert cache._ctx.readings is readings  # this refresh's, not an older one's
    finally:
        cache.close()


def test_the_states_kept_are_those_the_sources_declare() -> None:
    options = ProcessMetricsOptions(
        per_thread=True,
        thread_series_by="name",
        saturation=True,
        gc_pause_histogram=True,
        event_loop=True,
        children=True,
    )
    cache = SnapshotCache(options, SOURCES)
    try:
        cache.snapshot()
        kept = set(cache._ctx.state)
        declared = {state.name for source in cache.sources for state in source.keeps}
    finally:
        cache.close()
    assert kept == declared
    # One name, one state: two states under one name would overwrite each other.
    states = {id(state): state.name for s in SOURCES.values() for state in s.keeps}
    assert len(set(states.values())) == len(states)


def _sneaky(ctx: ReadContext) -> Reading:
    return {"count": ctx.direct_read("undeclared", lambda: 1) or 0}


def _nosy(ctx: ReadContext) -> Reading:
    return {"count": ctx.needed("process_memory", "rss") or 0}


# What a source reads without declaring it, and what the one warning says.
UNDECLARED = [
    (_sneaky, "reads 'undeclared' directly: declare it"),  # not in direct=
    (_nosy, "reads 'process_memory''s reading: declare it"),  # not in needs=
]


@pytest.mark.parametrize(("read", "said"), UNDECLARED, ids=["direct", "needs"])
def test_a_source_that_reads_what_it_did_not_declare_fails_and_says_so(
    read: Callable[[ReadContext], Reading],
    said: str,
    monkeypatch: pytest.MonkeyPatch,
    logged: LogLines,
) -> None:
    name = "process_num_threads"
    monkeypatch.setitem(SOURCES, name, SOURCES[name]._replace(read=read))  # type: ignore[index]
    cache = SnapshotCache(ProcessMetricsOptions(), {name, "process_memory"})
    try:
        readings = cache.snapshot().readings
    finally:
        cache.close()
    assert name not in readings and "process_memory" in readings
    (line,) = [line for line in logged.lines if name in line]
    assert said in line


def test_a_needed_reading_is_a_number_of_this_refresh_or_none() -> None:
    ctx = _context(FaultLog())
    ctx.source = SOURCES["process_num_threads"]  # it needs process_signals
    ctx.readings = {"process_signals": {THREAD_COUNT: 7, "count": 0}}
    assert ctx.needed("process_signals", THREAD_COUNT) == 7
    assert ctx.needed("process_signals", "count") == 0  # a 0 is a value
    assert ctx.needed("process_signals", "nope") is None
    assert ctx.needed("process_threads", THREAD_COUNT) is None  # off, or failed
    ctx.readings = {"process_signals": {THREAD_COUNT: {}}}  # points, not a number
    assert ctx.needed("process_signals", THREAD_COUNT) is None


INSTRUMENT_SIDE = {
    "__init__.py",  # the instrumentor
    "instruments.py",
    "service.py",
    "resource.py",
    "sdk_fork_guard.py",
    "package.py",
    "version.py",
}
"""The modules that know OpenTelemetry; every other module of the package is the snapshot side."""


def test_the_snapshot_side_imports_nothing_of_opentelemetry() -> None:
    package = Path(__file__).resolve().parent.parent / "src/opentelemetry/instrumentation/process"
    paths = [
        p
        for p in sorted(package.rglob("*.py"))
        if str(p.relative_to(package)) not in INSTRUMENT_SIDE
    ]
    assert len(paths) > 30
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            assert not [n for n in names if n.startswith("opentelemetry")], (path.name, names)
