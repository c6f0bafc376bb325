"""Runtime stalls end to end: a real ASGI server under ``opentelemetry-instrument``.

``uvicorn asgi_app:app`` (``apps/asgi_app.py``) runs under
``opentelemetry-instrument`` with ``OTEL_PYTHON_PROCESS_METRICS_EVENT_LOOP=true``,
configured by the environment only, once with ``--loop asyncio`` and once
with ``--loop uvloop``, into each VictoriaMetrics (dotted names, Prometheus
names). The test hits ``/block`` (``time.sleep(0.2)`` in the loop) once a second
and ``/gc`` (a large cyclic graph collected, timed) with urllib; the server
prints the length of each block and collection by its own clock, which is the
truth here. Each server is stopped by its pid.

Checked: the GC pause metrics arrive by default, with the timed collection in
them; ``process_metrics.eventloop.delay.max`` of the asyncio loop of
``MainThread`` is about 0.2 s, and uvloop's loop, which is not probed, has no
series; every query of the dashboard's Runtime row returns sane data from
these servers.
"""

from __future__ import annotations

import itertools
import math
import re
import signal
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from .checks import DOTTED, PROMETHEUS, Naming, dashboard_queries
from .launch import APPS, App
from .servers import (
    REPO,
    VENV_BIN,
    Children,
    VictoriaMetrics,
    child_env,
    free_port,
    wait_until,
)

pytestmark = pytest.mark.e2e

ASGI_APP = APPS / "asgi_app.py"
BLOCKS = 3
# The loop is probed every 20 ms: a block of b reads as b - INTERVAL to b, plus
# the wake-up latency and the noise of 2 shared cores (SLACK). uvloop's clock
# has 1 ms resolution. A collection's pause is inside the app's own bracket of
# it (two gc.callbacks around every other one), and most of it: short of it by the
# time between two adjacent callbacks, which a preempted thread stretches (MOST).
INTERVAL = 0.02
SLACK = 0.05
UVLOOP_CLOCK = 0.002
IDLE_MAX = 0.05
MOST = 0.5

DELAY_MAX = "process_metrics.eventloop.delay.max"
DELAY_P99 = "process_metrics.eventloop.delay.p99"
UTILIZATION = "process_metrics.eventloop.utilization"
PAUSE_TIME = "process_metrics.cpython.gc.pause.time"
PAUSE_MAX = "process_metrics.cpython.gc.pause.max"
PAUSE_BUCKET = "process_metrics.cpython.gc.pause.bucket"


@dataclass
class Served:
    """One server run: where it sent its metrics and what it printed."""

    app: App
    loop: str
    naming: Naming
    vm: VictoriaMetrics
    histogram: bool
    blocks: list[tuple[float, str]] = field(default_factory=list)
    """(seconds, thread name) of each /block, by the server's clock."""
    collected: list[float] = field(default_factory=list)
    """Seconds of each collection of /gc, bracketed by the app's own gc.callbacks."""
    full: list[float] = field(default_factory=list)
    """Seconds of every full collection, automatic ones included, bracketed alike."""
    gc_asked: float = 0.0
    """When /gc was asked (epoch seconds): series have samples from before it."""


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        body: bytes = answer.read()
        return body.decode()


def _start(
    children: Children, vm: VictoriaMetrics, naming: Naming, loop: str, histogram: bool
) -> tuple[Served, int]:
    port = free_port()
    service = (
        f"e2e-runtime-{loop}-{'prom' if naming.prometheus else 'dotted'}-{uuid.uuid4().hex[:8]}"
    )
    instance = str(uuid.uuid4())
    argv = [
        str(VENV_BIN / "opentelemetry-instrument"),
        "uvicorn",
        "asgi_app:app",
        "--app-dir",
        str(APPS),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--loop",
        loop,
        "--no-access-log",
    ]
    env = child_env(
        OTEL_SERVICE_NAME=service,
        OTEL_RESOURCE_ATTRIBUTES=f"service.instance.id={instance}",
        OTEL_METRICS_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=vm.otlp_url,
        OTEL_METRIC_EXPORT_INTERVAL="500",
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="system_metrics",
        OTEL_PYTHON_PROCESS_METRICS_EVENT_LOOP="true",
        OTEL_PYTHON_PROCESS_METRICS_GIL_WAIT="true",
        OTEL_PYTHON_PROCESS_METRICS_GC_PAUSE_HISTOGRAM="true" if histogram else "false",
    )
    child = children.start(f"uvicorn-{loop}-{service[-8:]}", argv, env)
    served = Served(App(child, service, instance), loop, naming, vm, histogram)
    return served, port


def _answering(served: Served, port: int) -> str:
    def up() -> str:
        assert served.app.child.alive(), served.app.child.describe()
        try:
            return _get(port, "/")
        except OSError as exc:
            raise AssertionError(f"not answering yet: {exc}") from exc

    return wait_until(up, 60, f"{served.app.child.name} to answer")


@pytest.fixture(scope="module")
def servers(
    vm: VictoriaMetrics, vm_prom: VictoriaMetrics, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Served]]:
    """Four servers (asyncio, uvloop) x (dotted, Prometheus names), run at once, then stopped."""
    if not ASGI_APP.is_file():
        pytest.skip(f"{ASGI_APP.relative_to(REPO)} is missing")
    pytest.importorskip("uvicorn")
    pytest.importorskip("uvloop")
    children = Children(tmp_path_factory.mktemp("asgi"))
    runs = [
        (loop, vm_, naming)
        for loop in ("asyncio", "uvloop")
        for vm_, naming in ((vm, DOTTED), (vm_prom, PROMETHEUS))
    ]
    try:
        started = [
            _start(children, vm_, naming, loop, histogram=naming.prometheus and loop == "asyncio")
            for loop, vm_, naming in runs
        ]
        for served, port in started:
            assert _answering(served, port) == "ok"
        # Once a second, each server blocks its loop for 0.2 s: three times.
        for _ in range(BLOCKS):
            for _, port in started:
                assert _get(port, "/block").startswith("blocked ")
            time.sleep(1.0)
        for served, port in started:
            served.gc_asked = time.time()
            assert _get(port, "/gc").startswith("collected ")
        time.sleep(1.5)  # three export intervals
        for served, _ in started:
            # By its pid (Popen.terminate). uvicorn shuts down, then raises SIGTERM
            # again with the default handler: no final export, hence the wait above.
            status = served.app.child.stop(timeout=20)
            assert status in (0, -signal.SIGTERM), served.app.child.describe()
            assert "Finished server process" in served.app.child.output()
            output = served.app.child.output()
            blocked = re.findall(r"^blocked ([\d.e-]+) in (.+)$", output, re.M)
            served.blocks = [(float(s), thread) for s, thread in blocked]
            collected = re.findall(r"^collected ([\d.e-]+)$", output, re.M)
            served.collected = [float(s) for s in collected]
            served.full = [float(s) for s in re.findall(r"^fullgc ([\d.e-]+)$", output, re.M)]
            # The package's callback was there first: the app's brackets surround it.
            assert re.search(r"^brackets [1-9]\d* gc callbacks$", output, re.M), output
        yield [served for served, _ in started]
    finally:
        children.stop_all()


def _selector(served: Served, metric: str, **labels: str) -> str:
    naming = served.naming
    name = metric if not naming.prometheus else _prometheus_name(metric)
    attrs = {
        "service.name": served.app.service,
        "service.instance.id": served.app.instance,
        **{k.replace("__", "."): v for k, v in labels.items()},
    }
    inner = ", ".join(f'{naming.label(k)}="{v}"' for k, v in attrs.items())
    return f'{{__name__="{name}", {inner}}}'


def _prometheus_name(metric: str) -> str:
    from opentelemetry.instrumentation.process.metrics import METRICS_BY_NAME

    from .checks import prometheus_name

    return prometheus_name(METRICS_BY_NAME[metric])


def _samples(served: Served, metric: str, **labels: str) -> dict[str, list[float]]:
    """Every sample of ``metric`` by series, the series named by its metric attributes."""
    rows = served.vm.export(_selector(served, metric, **labels), start=time.time() - 600)
    found: dict[str, list[float]] = {}
    for row in rows:
        attrs = {
            k: v
            for k, v in row["metric"].items()
            if k
            in (
                "thread.name",
                "thread_name",
                "cpython.gc.generation",
                "cpython_gc_generation",
                "le",
            )
        }
        key = ",".join(f"{k}={v}" for k, v in sorted(attrs.items()))
        found.setdefault(key, []).extend(float(v) for v in row["values"])
    return found


def _timed(served: Served, metric: str, **labels: str) -> list[tuple[float, float]]:
    """(timestamp in s, value) of every sample of the one series ``labels`` pick, in time order."""
    rows = served.vm.export(_selector(served, metric, **labels), start=time.time() - 600)
    pairs = [p for row in rows for p in zip(row["timestamps"], row["values"], strict=True)]
    return sorted((ts / 1000, float(v)) for ts, v in pairs)


def _label(served: Served, attribute: str) -> str:
    return served.naming.label(attribute)


def test_each_server_ran_its_loop_in_the_main_thread_and_printed_its_truths(
    servers: list[Served],
) -> None:
    for served in servers:
        assert len(served.blocks) == BLOCKS, served.app.child.output()
        assert {thread for _, thread in served.blocks} == {"MainThread"}
        assert all(0.2 <= seconds < 1.0 for seconds, _ in served.blocks), served.blocks
        assert len(served.collected) == 1 and served.collected[0] > 0.01, served.collected


def test_gc_pause_metrics_arrive_by_default_with_the_timed_collection_in_them(
    servers: list[Served],
) -> None:
    for served in servers:
        gen = _label(served, "cpython.gc.generation")
        time_by_gen = _samples(served, PAUSE_TIME)
        assert set(time_by_gen) == {f"{gen}={g}" for g in range(3)}, time_by_gen.keys()
        for key, values in time_by_gen.items():
            assert values == sorted(values), f"{key}: a counter went down"
        assert time_by_gen[f"{gen}=0"][-1] > 0  # the server allocates: generation 0 collects
        # The timed full collection is in the time total; each interval's longest
        # pause is one of the full collections the app measured (automatic ones
        # come too, and a preempted one lasts longer on this shared machine).
        around = served.collected[0]
        assert around in served.full, (around, served.full)
        assert time_by_gen[f"{gen}=2"][-1] >= around * MOST
        longest = _samples(served, PAUSE_MAX)[f"{gen}=2"]
        paused = [v for v in longest if v]
        # The first interval's may be a collection at start-up, before the app's brackets.
        for v in paused[1:]:
            assert any(b * MOST <= v <= b for b in served.full), (served.loop, v, served.full)
        assert max(paused) >= around * MOST, (served.loop, paused, around)
        assert max(paused) <= time_by_gen[f"{gen}=2"][-1]
        assert len(paused) <= len(served.full) + 1, (paused, served.full)
        if len(longest) > len(served.full):
            assert min(longest) == 0.0  # intervals without a full collection
        buckets = _samples(served, PAUSE_BUCKET)
        assert bool(buckets) == served.histogram, served.loop


@pytest.mark.parametrize(
    "which",
    range(4),
    ids=["asyncio-dotted", "asyncio-prometheus", "uvloop-dotted", "uvloop-prometheus"],
)
def test_loop_delay_of_the_main_thread_is_the_block(servers: list[Served], which: int) -> None:
    served = servers[which]
    thread = _label(served, "thread.name")
    delays = _samples(served, DELAY_MAX)
    if served.loop == "uvloop":
        # Not probed: no Python select to hook (docs/runtime.md), so no series at all.
        assert delays == {} and _samples(served, UTILIZATION) == {}, delays
        return
    assert set(delays) == {f"{thread}=MainThread"}, delays.keys()
    values = delays[f"{thread}=MainThread"]
    block = max(seconds for seconds, _ in served.blocks)
    clock = UVLOOP_CLOCK if served.loop == "uvloop" else 0.0
    # A full collection (of /gc, in a worker thread) holds the GIL, so the loop too:
    # tens of ms, but on a loaded machine it can last as long as a block.
    stalls = [block, *served.full]
    assert block - INTERVAL - clock <= max(values) <= max(stalls) + SLACK, (values, stalls)
    # Each block in an export interval of its own; the intervals between them are
    # idle, but for the full collections that may be as long.
    long = 0.2 - INTERVAL - clock
    late = sum(v >= long for v in values)
    assert BLOCKS <= late <= BLOCKS + sum(b + SLACK >= long for b in served.full), (values, stalls)
    assert min(values) <= IDLE_MAX, values
    p99 = _samples(served, DELAY_P99)[f"{thread}=MainThread"]
    assert max(p99) <= max(values) and len(p99) == len(values)
    utilization = _samples(served, UTILIZATION)
    if served.loop == "uvloop":
        assert utilization == {}  # libuv does not expose its idle time
    else:
        shares = utilization[f"{thread}=MainThread"]
        assert all(0.0 <= share <= 1.0 for share in shares), shares
        # A block's 0.2 s are busy time in the interval that holds it, or in the two it
        # straddles when a collection came during it. An interval's busy seconds are its
        # share times its length, from the collection before it (a loaded machine
        # stretches the intervals past the 0.5 s of the export interval).
        timed = _timed(served, UTILIZATION, thread__name="MainThread")
        busy = [share * (t1 - t0) for (t0, _), (t1, share) in itertools.pairwise(timed)]
        assert max(map(sum, itertools.pairwise(busy)), default=0.0) >= 0.2 * 0.9, timed


def test_the_runtime_row_of_the_dashboard_shows_these_servers(
    servers: list[Served], vm_prom: VictoriaMetrics
) -> None:
    prom = [s for s in servers if s.naming.prometheus]
    services = "|".join(s.app.service for s in prom)
    everything = dashboard_queries(variables={"service": services})
    runtime = [q for q in everything if q.row == "Runtime"]
    assert len(runtime) == 5, runtime
    # Every event-loop query of the dashboard is here or in the stalls row, which the
    # test below runs against these servers (the other e2e test leaves them out).
    assert {q.expr for q in everything if "process_metrics_eventloop_" in q.expr} <= {
        q.expr for q in everything if q.row in ("Runtime", STALLS_ROW)
    }
    results: dict[str, list[dict[str, Any]]] = {}
    for q in runtime:
        results[q.source] = vm_prom.query(q.expr)
    empty = [source for source, result in results.items() if not result]
    assert not empty, f"queries without data: {empty}"

    def values(source: str) -> dict[tuple[str, str], float]:
        return {
            (
                r["metric"].get("service_name", ""),
                r["metric"].get("cpython_gc_generation") or r["metric"].get("thread_name", ""),
            ): float(r["value"][1])
            for r in results[source]
        }

    by_service = {s.app.service: s for s in prom}
    share = values("panel GC pause time (share of time paused) / A")
    assert {service for service, _ in share} == set(by_service)
    assert all(0.0 <= v < 1.0 for v in share.values()), share
    longest = values("panel Longest GC pause / A")
    for service, served in by_service.items():
        # The timed collection is in the window; a longer pause may be too (see above).
        total = _samples(served, PAUSE_TIME)["cpython_gc_generation=2"][-1]
        assert served.collected[0] * MOST <= longest[(service, "2")] <= total, longest
    delay = values("panel Event-loop delay (max and p99) / A")
    p99 = values("panel Event-loop delay (max and p99) / B")
    probed = {s: served for s, served in by_service.items() if served.loop == "asyncio"}
    assert {service for service, _ in delay} == set(probed), delay  # uvloop is not probed
    for service, served in probed.items():
        block = max(seconds for seconds, _ in served.blocks)
        top = delay[(service, "MainThread")]
        stall = max(block, *served.full)  # a full collection holds the loop too
        assert block - INTERVAL - UVLOOP_CLOCK <= top <= stall + SLACK, delay
        assert 0 <= p99[(service, "MainThread")] <= top
    busy = values("panel Event-loop utilization / A")
    asyncio_service = next(s for s, served in by_service.items() if served.loop == "asyncio")
    assert set(busy) == {(asyncio_service, "MainThread")}, busy  # not measured on uvloop
    assert 0.0 < busy[(asyncio_service, "MainThread")] <= 1.0


def test_histogram_quantile_reads_the_pause_buckets(
    servers: list[Served], vm_prom: VictoriaMetrics
) -> None:
    """The opt-in buckets are cumulative counters with le: PromQL's histogram_quantile works."""
    (served,) = [s for s in servers if s.histogram]
    selector = f'service_name="{served.app.service}"'
    name = _prometheus_name(PAUSE_BUCKET)
    # A window that starts after the series' first sample: for a series that starts
    # inside the window, VictoriaMetrics may take its first value as the baseline
    # (a large first value is read as a counter that began earlier), bucket by bucket.
    window = f"{math.ceil(time.time() - served.gc_asked + 1)}s"
    increases = f"sum by (le) (increase({name}{{{selector}}}[{window}]))"
    top = vm_prom.query(f"histogram_quantile(1, {increases})")
    median = vm_prom.query(f"histogram_quantile(0.5, {increases})")
    assert top and median, (top, median)
    q100, q50 = float(top[0]["value"][1]), float(median[0]["value"][1])
    # The top bucket's bound is at or above the longest full collection (the timed one,
    # or a longer automatic one), within one 1-2-5 step (a factor of 2.5).
    longest = max(served.full)
    assert served.collected[0] * MOST <= q100 <= longest * 2.5, (q100, served.full)
    assert 0 < q50 <= q100
    # Cumulative: the count at each bound never falls as the bound grows.
    rows = vm_prom.query(f"{name}{{{selector}}}")
    counts = sorted((float(r["metric"]["le"]), float(r["value"][1])) for r in rows)
    assert len(counts) == 17 and counts[-1][0] == float("inf")
    assert [c for _, c in counts] == sorted(c for _, c in counts)


STALLS_ROW = "Where the time went (stalls)"


def test_the_stalls_row_of_the_dashboard_shows_these_servers(
    servers: list[Served], vm_prom: VictoriaMetrics
) -> None:
    """Every query of the row has data, but those of an automatic source this host lacks."""
    from opentelemetry.instrumentation.process.metrics import METRICS
    from opentelemetry.instrumentation.process.sources import SOURCES

    from ..conftest import automatic_here

    prom = [s for s in servers if s.naming.prometheus]
    services = "|".join(s.app.service for s in prom)
    row = [q for q in dashboard_queries(variables={"service": services}) if q.row == STALLS_ROW]
    assert len(row) >= 8, row
    absent_here = {
        _prometheus_name(m.name)
        for m in METRICS
        if SOURCES[m.source].auto and not automatic_here(m)
    }
    # GC pauses of 100 ms or more are not sure to happen here: test_exemplars_e2e.py
    # runs the panel of stalls against an app that makes one, and a loop stall.
    elsewhere = {_prometheus_name("process_metrics.cpython.gc.stall.duration")}
    checked = [q for q in row if not any(name in q.expr for name in absent_here | elsewhere)]
    assert len(checked) >= 7, (checked, absent_here)
    assert any("process_metrics_eventloop_stall_duration" in q.expr for q in checked)
    empty = [q.source for q in checked if not vm_prom.query(q.expr)]
    assert not empty, f"queries without data: {empty}"
    by_query = {q.source: vm_prom.query(q.expr) for q in checked}
    gil = next(
        v
        for k, v in by_query.items()
        if k.startswith("panel Wait for the GIL") and k.endswith("/ A")
    )
    assert all(float(r["value"][1]) >= 0.0 for r in gil)  # a mean wait per wake, in seconds


def _stalls_page_queries() -> list[str]:
    """The PromQL of docs/stalls.md, one query per ``#`` comment, for ``checkout``."""
    text = (REPO / "docs" / "stalls.md").read_text()
    blocks = re.findall(r"```promql\n(.*?)```", text, flags=re.DOTALL)
    return [
        " ".join(part.split("\n", 1)[1].split())
        for block in blocks
        for part in block.split("# ")[1:]
    ]


def test_the_queries_of_the_stalls_page_work_on_these_servers(
    servers: list[Served], vm_prom: VictoriaMetrics
) -> None:
    """Each rate the page gives has data, but those of an automatic source this host lacks."""
    from opentelemetry.instrumentation.process.metrics import METRICS
    from opentelemetry.instrumentation.process.sources import SOURCES

    from ..conftest import automatic_here

    found = _stalls_page_queries()
    assert len(found) == 4, found  # throttled, run queue, CPU pressure, GC pauses
    services = "|".join(s.app.service for s in servers if s.naming.prometheus)
    absent_here = {
        _prometheus_name(m.name)
        for m in METRICS
        if SOURCES[m.source].auto and not automatic_here(m)
    }
    checked = [expr for expr in found if not any(name in expr for name in absent_here)]
    assert len(checked) >= 2, (checked, absent_here)  # the run queue and the GC pauses at least
    for expr in checked:
        assert 'service_name="checkout"' in expr, expr
        result = vm_prom.query(
            expr.replace('service_name="checkout"', f'service_name=~"{services}"')
        )
        assert result, f"nothing from the page's query: {expr}"
        assert all(float(r["value"][1]) >= 0 for r in result), (expr, result)
