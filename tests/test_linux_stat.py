"""linux/stat.py, the one parser of /proc/<pid>/stat: its fields against psutil and getrusage."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import psutil
import pytest

from opentelemetry.instrumentation.process.linux import stat

from .support.threadjobs import waiting_thread

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_this_process_as_psutil_reads_it() -> None:
    me = psutil.Process()
    first = me.cpu_times()
    before = resource.getrusage(resource.RUSAGE_SELF)
    found = stat.of_process(os.getpid())
    after = resource.getrusage(resource.RUSAGE_SELF)
    last = me.cpu_times()
    assert found.state == "R"  # this thread is running, reading it
    assert found.ppid == os.getppid()
    assert before.ru_minflt <= found.minflt <= after.ru_minflt
    assert before.ru_majflt <= found.majflt <= after.ru_majflt
    # psutil divides the same ticks, and the kernel keeps them monotonic, so the
    # reading lies between psutil's two; compared in ticks, not in rounded seconds.
    ticks = stat.CLOCK_TICKS
    assert round(first.user * ticks) <= round(found.utime * ticks) <= round(last.user * ticks)
    assert round(first.system * ticks) <= round(found.stime * ticks) <= round(last.system * ticks)
    tick = 1 / ticks
    # psutil's create time is the boot time plus the start tick.
    started = psutil.boot_time() + found.starttime / stat.CLOCK_TICKS
    assert started == pytest.approx(me.create_time(), abs=tick)


def test_a_thread_and_a_child_have_their_own_file() -> None:
    with waiting_thread() as (_, tid):
        task = stat.read(f"/proc/self/task/{tid}/stat")
        # Waiting on the event, it sleeps, unless a loaded machine has it runnable just now.
        assert task.state in "SR" and task.ppid == os.getppid()
        assert task.starttime >= stat.of_process(os.getpid()).starttime
    child = subprocess.Popen(["sleep", "30"])
    try:
        found = stat.of_process(child.pid)
        assert found.ppid == os.getpid()
        assert found.starttime >= stat.of_process(os.getpid()).starttime
    finally:
        child.kill()
        child.wait()
    with pytest.raises((FileNotFoundError, ProcessLookupError)):
        stat.of_process(child.pid)  # reaped: gone


def test_a_name_with_spaces_and_parentheses_is_passed_over() -> None:
    line = b"42 (a) b) (c) S 7 42 42 0 -1 4194560 11 0 3 0 250 130 0 0 20 0 1 0 9876 0 0"
    found = stat.parse(line)
    assert (found.state, found.ppid, found.minflt, found.majflt) == ("S", 7, 11, 3)
    assert (found.utime, found.stime) == (250 / stat.CLOCK_TICKS, 130 / stat.CLOCK_TICKS)
    assert found.starttime == 9876


@pytest.mark.parametrize("garbage", [b"", b"no parenthesis at all", b"1 (x) S 1 2 3"])
def test_text_that_is_not_a_stat_line_is_refused(garbage: bytes) -> None:
    with pytest.raises(ValueError, match="not a stat line"):
        stat.parse(garbage)
