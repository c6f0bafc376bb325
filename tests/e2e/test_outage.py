"""Scenario 4: the collector and the backend go away for several export intervals, then return.

Two applications push through the collector, one over gRPC and one over HTTP,
every 300 ms. Both servers are stopped for 3 s (10 intervals), then started
again on the same ports, VictoriaMetrics on the same data folder. Throughout,
the applications must keep working with bounded memory (their RSS is read from
outside), and afterwards every counter must continue where it was: cumulative,
never reset, never a negative rate.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from pathlib import Path

import psutil
import pytest

from .checks import PROMETHEUS, Sampler, wait_for_names
from .launch import App, push_app
from .servers import (
    Children,
    Collector,
    VictoriaMetrics,
    collector_config,
    free_port,
    wait_until,
)

pytestmark = pytest.mark.e2e

INTERVAL_MS = 300
OUTAGE_S = 3.0
MAX_RSS_GROWTH = 8 << 20  # bytes, from the start of the outage to the end of the test


class RssSampler(Sampler):
    """Reads the RSS of some processes from /proc every 50 ms, in a thread."""

    def __init__(self, pids: list[int]) -> None:
        self.samples: dict[int, list[tuple[float, int]]] = {pid: [] for pid in pids}
        super().__init__("rss-sampler")

    def _run(self) -> None:
        procs = {pid: psutil.Process(pid) for pid in self.samples}
        while not self._stop.wait(0.05):
            for pid, proc in procs.items():
                with suppress(psutil.Error):
                    self.samples[pid].append((time.time(), proc.memory_info().rss))

    def at(self, pid: int, when: float) -> int:
        """The last RSS read at or before ``when``."""
        return [rss for t, rss in self.samples[pid] if t <= when][-1]

    def peak_after(self, pid: int, when: float) -> int:
        return max(rss for t, rss in self.samples[pid] if t >= when)


def beats(app: App) -> int:
    return app.child.output().count("beat ")


@pytest.fixture
def servers(
    vm_binary: Path, otelcol_binary: Path, tmp_path: Path
) -> Iterator[tuple[VictoriaMetrics, Collector]]:
    """A backend and a collector of this test's own, since it stops them."""
    vm = VictoriaMetrics(vm_binary, tmp_path / "vm-data", tmp_path / "vm.log", True)
    grpc_port, http_port = free_port(), free_port()
    config = tmp_path / "otelcol.yaml"
    config.write_text(collector_config(grpc_port, http_port, [vm.otlp_url]))
    col = Collector(otelcol_binary, config, tmp_path / "otelcol.log", grpc_port, http_port)
    with ExitStack() as stack:
        stack.callback(vm.stop)
        stack.callback(col.stop)
        vm.start()
        col.start()
        yield vm, col


def test_outage_and_recovery(
    servers: tuple[VictoriaMetrics, Collector], children: Children, service: str
) -> None:
    vm, col = servers
    # A 1 s exporter timeout (the default is 10 s): every export of the outage
    # fails and is dropped, instead of one export retrying through it.
    endpoints = {"grpc": col.grpc_endpoint, "http": f"{col.http_endpoint}/v1/metrics"}
    apps = [
        push_app(
            children,
            protocol,
            protocol,
            endpoint,
            service,
            interval_ms=INTERVAL_MS,
            E2E_WORK="1",
            OTEL_EXPORTER_OTLP_TIMEOUT="1",
        )
        for protocol, endpoint in endpoints.items()
    ]
    counters = ["process_cpu_time_seconds_total", "process_context_switches_total"]
    with RssSampler([a.child.pid for a in apps]) as rss:
        for app in apps:
            wait_for_names(vm, app.selector(PROMETHEUS), counters)
        time.sleep(4 * INTERVAL_MS / 1000)  # a few samples before the outage

        down = time.time()
        beats_down = {app.instance: beats(app) for app in apps}
        col.stop()
        gone = time.time()  # the collector has exited: nothing is received from here on
        vm.stop()
        time.sleep(OUTAGE_S)
        for app in apps:
            assert app.child.alive(), app.child.describe()
            done = beats(app) - beats_down[app.instance]
            # A beat is 50 ms of sleep and a little work: about 50 in the outage.
            assert done >= 10, f"{app.child.name} worked only {done} beats in the outage"
        vm.start()
        back = time.time()  # the collector is started again: nothing is received before
        col.start()
        up = time.time()

        # Data flows again, from both applications.
        def recovered() -> bool:
            for app in apps:
                rows = vm.export(app.selector(PROMETHEUS), start=up)
                names = {r["metric"]["__name__"] for r in rows}
                assert counters[0] in names, f"{app.child.name}: nothing since the restart"
            return True

        wait_until(recovered, 20, "data from both applications after the restart")
        time.sleep(4 * INTERVAL_MS / 1000)  # a few samples after it
        end = time.time()

    for app in apps:
        name = app.child.name
        assert app.child.alive(), app.child.describe()
        pid = app.child.pid
        growth = rss.peak_after(pid, down) - rss.at(pid, down)
        assert growth < MAX_RSS_GROWTH, f"{name}: RSS grew {growth >> 10} KiB over the outage"

        rows = vm.export(f'{{__name__=~".+_total", {app.selector(PROMETHEUS)[1:]}')
        assert {r["metric"]["__name__"] for r in rows} >= set(counters), rows
        for row in rows:
            series = f"{name} {row['metric']['__name__']} {row['metric']}"
            points = sorted(zip(row["timestamps"], row["values"], strict=True))
            times = [t / 1000 for t, _ in points]
            values = [v for _, v in points]
            # Data from before the outage survived the restart; data after it arrived.
            assert min(times) < down and max(times) > up, f"{series}: {times}"
            # There really was a hole. A point taken in the last second of the
            # outage may arrive after it (the exporter retries for up to its
            # 1 s timeout); none taken well before then can. The hole is bounded by
            # when the collector was gone and when it was started again, as read
            # here: a loaded machine may stretch its shutdown or the test's reads.
            hole = [t for t in times if gone < t < back - 1.6]
            assert not hole, f"{series}: samples during the outage at {hole}"
            # Cumulative: never decreasing, across the outage too.
            drops = [(a, b) for a, b in itertools.pairwise(values) if b < a]
            assert not drops, f"{series}: counter went down: {drops}"

        selector = app.selector(PROMETHEUS)[1:-1]
        window = f"{int(end - down) + 30}s"
        # keep_metric_names (MetricsQL): process_ and system_cpu_time share labels.
        everything = f'{{__name__=~".+_total", {selector}}}'
        resets = vm.query(f"resets({everything}[{window}]) keep_metric_names")
        assert resets and all(float(r["value"][1]) == 0 for r in resets), resets
        rates = vm.query_range(
            f"rate({everything}[1s]) keep_metric_names", down - 2, end, INTERVAL_MS / 1000
        )
        values = [float(v) for r in rates for _, v in r["values"]]
        assert values and min(values) >= 0, f"negative rate: {min(values)}"
