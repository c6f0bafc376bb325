"""PSS and USS: the smaps_rollup read against psutil's memory_full_info(), and the metrics."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from typing import Any

import psutil
import pytest

from opentelemetry.instrumentation.process.facts import read_facts, this_process
from opentelemetry.instrumentation.process.faultlog import FaultLog
from opentelemetry.instrumentation.process.linux import smaps
from opentelemetry.instrumentation.process.options import ProcessMetricsOptions
from opentelemetry.instrumentation.process.platforms import ON_LINUX
from opentelemetry.instrumentation.process.sources import SOURCES, ReadContext

from .conftest import collect, value

MIB = 1024 * 1024
linux_only = pytest.mark.skipif(not ON_LINUX, reason="smaps_rollup is Linux only")


def context(direct: bool) -> ReadContext:
    process = this_process()
    options = ProcessMetricsOptions(direct_reads=direct)
    return ReadContext(
        process=process,
        facts=read_facts(process, cpu_frequency=False, faults=FaultLog()),
        options=options,
        faults=FaultLog(),
        direct=ON_LINUX and direct,
    )


@linux_only
def test_smaps_rollup_agrees_with_psutil_within_what_the_reads_touch() -> None:
    shared = mmap.mmap(-1, 32 * MIB)  # anonymous shared memory: touched, private to us
    try:
        shared.write(b"x" * (32 * MIB))
        # psutil read on either side, in a round where memory held still: the session's heap
        # can move by tens of MiB at any moment (a collector returning pages).
        for _ in range(5):
            before = psutil.Process().memory_full_info()
            pss, uss = smaps.pss_uss()
            after = psutil.Process().memory_full_info()
            if abs(after.pss - before.pss) <= 2 * MIB and abs(after.uss - before.uss) <= 2 * MIB:
                break
        # Read a moment apart: they differ by the pages touched in between.
        for name, ours in (("pss", pss), ("uss", uss)):
            low, high = sorted((getattr(before, name), getattr(after, name)))
            assert low - 2 * MIB <= ours <= high + 2 * MIB, (name, before, ours, after)
        assert uss >= 32 * MIB and pss >= uss
    finally:
        shared.close()


@linux_only
def test_the_direct_read_and_the_psutil_fallback_give_the_same_fields() -> None:
    read: Callable[[ReadContext], Any] = SOURCES["process_smaps"].read
    ctx = context(True)
    # The fallback read on either side, in a round where memory held still (as above).
    for _ in range(5):
        before = read(context(False))
        direct = read(ctx)
        after = read(context(False))
        if all(abs(after[f] - before[f]) <= 2 * MIB for f in ("pss", "uss")):
            break
    assert ctx.direct_failed == set()  # the rollup was read, not psutil
    assert set(direct) == set(before) == {"pss", "uss"}
    for field in ("pss", "uss"):
        low, high = sorted((before[field], after[field]))
        assert low - 2 * MIB <= direct[field] <= high + 2 * MIB, (field, before, direct, after)


@linux_only
def test_a_missing_field_is_an_oserror(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "rollup"
    path.write_text("Rss: 10 kB\nPss: 5 kB\n")
    with pytest.raises(OSError, match="Private_Clean"):
        smaps.pss_uss(str(path))
    path.write_text("Pss: 5 kB\nPrivate_Clean: 1 kB\nPrivate_Dirty: 2 kB\n")
    assert smaps.pss_uss(str(path)) == (5 * 1024, 3 * 1024)


def test_pss_and_uss_are_off_by_default_and_on_through_include(
    instrument: Callable[..., object], reader: object
) -> None:
    instrument()
    got = collect(reader)  # type: ignore[arg-type]
    assert "process_metrics.memory.pss" not in got
    assert "process_metrics.memory.uss" not in got


@linux_only
def test_pss_and_uss_metrics_through_include(
    instrument: Callable[..., object], reader: object
) -> None:
    instrument(include=["process_metrics.memory.*"])
    # psutil read on either side of the collection: the values must lie between
    # (with 4 MiB of slack), in a round where memory held still. The session's
    # heap can move by tens of MiB in between (a collector returning pages).
    for _ in range(5):
        before = psutil.Process().memory_full_info()
        got = collect(reader)  # type: ignore[arg-type]
        after = psutil.Process().memory_full_info()
        if abs(after.pss - before.pss) <= 4 * MIB and abs(after.uss - before.uss) <= 4 * MIB:
            break
    for name in ("pss", "uss"):
        ours = value(got[f"process_metrics.memory.{name}"])
        low, high = sorted((getattr(before, name), getattr(after, name)))
        assert low - 4 * MIB <= ours <= high + 4 * MIB, (name, before, ours, after)


@linux_only
def test_the_pss_of_forked_workers_adds_up_where_their_rss_overcounts() -> None:
    """A master with 64 MiB of touched memory and 3 forked workers sharing it copy-on-write."""
    from .support.groupkids import Kid

    def sizes() -> list[int]:
        return [*smaps.pss_uss(), psutil.Process().memory_info().rss]

    def master() -> dict[str, list[list[int]]]:
        region = bytearray(b"x" * (64 * MIB))
        workers = [Kid(sizes) for _ in range(3)]
        rows = [*(w.result for w in workers), sizes()]
        for w in workers:
            w.stop()
        del region
        return {"rows": rows}

    kid = Kid(master)
    try:
        rows = kid.result["rows"]
    finally:
        kid.kill()
    pss = sum(r[0] for r in rows)
    rss = sum(r[2] for r in rows)
    # RSS counts the shared 64 MiB once per process; PSS divides it among them.
    assert rss - pss >= 2.5 * 64 * MIB, (rss, pss)
    # PSS: the region once, plus at most the rest of what the processes hold.
    rest = rss - 4 * 64 * MIB
    assert 64 * MIB <= pss <= 64 * MIB + rest + 8 * MIB, (rss, pss)
    for _pss, worker_uss, worker_rss in rows[:3]:
        assert worker_rss >= 64 * MIB and worker_uss < 16 * MIB, (worker_uss, worker_rss)
