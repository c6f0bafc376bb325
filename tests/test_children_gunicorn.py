"""Supervisor mode in a real gunicorn: examples/gunicorn/gunicorn_master.conf.py.

The master is instrumented with ``children=True``; the workers run no
exporter. Three workers are recycled by ``--max-requests 4``. Values are held
against each worker's own ``/proc`` files, read by the test around a scrape.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from opentelemetry.instrumentation.process.catalog import PER_CHILD

from .support.examples import BIN, Lines, free_port, start

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc")

CONF = "examples/gunicorn/gunicorn_master.conf.py"
PAGE = resource.getpagesize()
TICKS = os.sysconf("SC_CLK_TCK")
SLOT = "process_metrics_worker_slot"


def _gunicorn(workers: int, *extra: str, **env: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    proc = start(
        [
            *(str(BIN / "gunicorn"), "-c", CONF, "--bind", f"127.0.0.1:{port}"),
            *("--workers", str(workers), *extra),
        ],
        stderr=subprocess.DEVNULL,
        **env,
    )
    return proc, port


def _get(url: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body: str = response.read().decode()
                return body
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class Master:
    """A gunicorn master with the Prometheus variant: one /metrics for the whole server."""

    def __init__(self, workers: int, *extra: str) -> None:
        self.metrics_port = free_port()
        self.proc, self.port = _gunicorn(
            workers,
            *extra,
            OTEL_METRICS_EXPORTER="prometheus",
            OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1",
            OTEL_EXPORTER_PROMETHEUS_PORT=str(self.metrics_port),
            OTEL_PYTHON_PROCESS_METRICS_CHILD_PID="true",
        )
        self.pid = self.proc.pid

    def request(self) -> str:
        return _get(f"http://127.0.0.1:{self.port}/")

    def scrape(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Every sample of the scrape, by sample name."""
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(
            _get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        ):
            for s in family.samples:
                out.setdefault(s.name, []).append((dict(s.labels), s.value))
        return out

    def workers(self) -> set[int]:
        return {c.pid for c in psutil.Process(self.pid).children()}


def _stop(proc: subprocess.Popen[str], timeout: float = 40) -> int:
    """SIGTERM gunicorn and wait; if it does not go, say which process hangs where."""
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children()]
    except psutil.Error:
        family = []
    proc.terminate()
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        where = {}
        for p in family:
            try:
                with open(f"/proc/{p.pid}/wchan") as f:
                    where[p.pid] = (p.status(), f.read())
            except (OSError, psutil.Error):
                where[p.pid] = ("gone", "")
        proc.kill()
        proc.wait(5)
        pytest.fail(f"gunicorn did not stop in {timeout:.0f} s: {where}")


@pytest.fixture
def master() -> Iterator[Master]:
    m = Master(3, "--max-requests", "4")
    try:
        yield m
    finally:
        assert _stop(m.proc) == 0


def _per_worker(samples: list[tuple[dict[str, str], float]]) -> dict[int, tuple[int, float]]:
    """``pid -> (slot, value)`` of the per-child samples."""
    return {
        int(labels["process_pid"]): (int(labels[SLOT]), value)
        for labels, value in samples
        if labels.get(SLOT)
    }


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def _stat_cpu(pid: int) -> float:
    """utime + stime + cutime + cstime of ``pid``, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return sum(int(x) for x in fields[11:15]) / TICKS


def _tree_cpu(scrape: dict[str, list[tuple[dict[str, str], float]]]) -> float:
    return sum(v for _, v in scrape["process_metrics_tree_cpu_time_seconds_total"])


def _wait_for_slots(master: Master, count: int) -> dict[str, Any]:
    """A scrape that lists ``count`` workers, the same ones before and after it."""
    deadline = time.monotonic() + 30
    while True:
        before = master.workers()
        scrape = master.scrape()
        after = master.workers()
        rss = _per_worker(scrape.get("process_memory_usage_bytes", []))
        if len(rss) == count and set(rss) == before == after:  # no recycling meanwhile
            return scrape
        assert time.monotonic() < deadline, f"slots {rss}, workers {before}, then {after}"
        time.sleep(0.1)


def test_the_masters_rss_of_each_slot_is_the_workers_own(master: Master) -> None:
    master.request()
    _wait_for_slots(master, 3)
    for _ in range(3):
        workers = master.workers()
        before = {pid: _rss(pid) for pid in workers}
        reported = _per_worker(master.scrape()["process_memory_usage_bytes"])
        after = {pid: _rss(pid) for pid in workers}
        if master.workers() != workers:  # one was recycled meanwhile: try again
            continue
        assert set(reported) == workers
        assert sorted(slot for slot, _ in reported.values()) == [0, 1, 2]
        for pid, (_, value) in reported.items():
            low, high = min(before[pid], after[pid]), max(before[pid], after[pid])
            assert low - 2 * PAGE <= value <= high + 2 * PAGE, (pid, value, before, after)
        return
    pytest.fail("the workers kept changing")


def test_tree_cpu_never_decreases_over_recycling_and_covers_every_worker(
    master: Master,
) -> None:
    master.request()
    _wait_for_slots(master, 3)
    seen: list[float] = []
    slots_seen: set[int] = set()
    pids_seen: set[int] = set()
    for _ in range(10):
        for _ in range(4):
            body = master.request()
            pids_seen.add(int(body.split()[-1]))
        scrape = master.scrape()
        seen.append(_tree_cpu(scrape))
        per = _per_worker(scrape["process_memory_usage_bytes"])
        slots_seen |= {slot for slot, _ in per.values()}
        assert len({slot for slot, _ in per.values()}) == len(per), "two workers share a slot"
    assert seen == sorted(seen), f"the tree's CPU time went down: {seen}"
    assert len(pids_seen) > 3, "no worker was recycled"
    assert slots_seen == {0, 1, 2}, "recycled workers came back in other slots"
    # Every live slot is listed once the respawns have settled.
    scrape = _wait_for_slots(master, 3)
    exits = scrape["process_metrics_tree_process_exits_total"][0][1]
    restarts = scrape["process_metrics_tree_process_restarts_total"][0][1]
    assert exits >= 1 and restarts >= 1
    assert restarts <= exits
    count = scrape["process_metrics_tree_process_count"][0][1]
    assert count == 1 + 3
    # The CPU the test measures: the master's own and what it reaped (its
    # stat's cutime and cstime), and each live worker's; then one scrape.
    measured = _stat_cpu(master.pid) + sum(_stat_cpu(pid) for pid in master.workers())
    after = _tree_cpu(master.scrape())
    assert after >= measured - 2 / TICKS, (after, measured)


def _console_reports(
    proc: subprocess.Popen[str], want: int, timeout: float = 30, *, workers: int = 0
) -> list[Any]:
    """``want`` reports at least, and one at least from each of ``workers`` workers."""
    assert proc.stdout is not None
    lines = Lines(proc.stdout)
    deadline = time.monotonic() + timeout
    reports: list[Any] = []

    def enough() -> bool:
        reporting = {r["process.pid"] for r in reports if r["role"] == "worker"}
        return len(reports) >= want and len(reporting) >= workers

    while not enough() and time.monotonic() < deadline:
        line = lines.next(deadline)
        if line is None:
            break
        if line.startswith("{"):
            reports.append(json.loads(line))
    return reports


def _console_run(want: int, *, reporting: int = 0, **env: str) -> tuple[int, list[Any], set[int]]:
    """Two workers with the console exporter: the master's pid, ``want`` reports (and one of
    each of ``reporting`` workers), the workers."""
    proc, port = _gunicorn(
        2, OTEL_METRICS_EXPORTER="console", OTEL_METRIC_EXPORT_INTERVAL="300", **env
    )
    try:
        _get(f"http://127.0.0.1:{port}/")
        reports = _console_reports(proc, want, workers=reporting)
        workers = {c.pid for c in psutil.Process(proc.pid).children()}
    finally:
        assert _stop(proc) == 0
    return proc.pid, reports, workers


def test_the_console_variant_exports_from_the_master_only() -> None:
    pid, reports, workers = _console_run(6)
    assert len(reports) >= 6
    assert {r["process.pid"] for r in reports} == {pid}, "a worker exported"
    assert {r["role"] for r in reports} == {"master"}
    assert len(workers) == 2
    last = reports[-1]["rss_by_slot"]
    assert set(last) == {"master", "0", "1"}


def test_the_mixed_recipe_reports_nothing_twice() -> None:
    # Until both workers have reported: the master reports from before it forks them, and a
    # worker slow to start on a loaded machine could miss a fixed count of reports.
    pid, reports, workers = _console_run(12, reporting=2, GUNICORN_WORKER_METRICS="runtime")
    masters = [r for r in reports if r["role"] == "master"]
    by_worker = [r for r in reports if r["role"] == "worker"]
    assert masters and {r["process.pid"] for r in masters} == {pid}
    assert {r["process.pid"] for r in by_worker} == workers, "each worker reports its runtime"
    worker_names = {n for r in by_worker for n in r["metrics"]}
    assert worker_names, "the workers reported nothing"
    assert all(n.startswith(("cpython.", "process_metrics.cpython.")) for n in worker_names)
    # What the master reports per worker, no worker reports of itself.
    assert not worker_names & set(PER_CHILD)
    assert set(masters[-1]["rss_by_slot"]) == {"master", "0", "1"}
