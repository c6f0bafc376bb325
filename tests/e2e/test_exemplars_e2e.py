"""From a stall to its trace, end to end: FastAPI, a real collector, Prometheus with exemplars.

``uvicorn fastapi_app:app --loop asyncio`` (``apps/fastapi_app.py``): FastAPI
traced by ``opentelemetry-instrumentation-fastapi``, the package on with
``event_loop=True``, metrics and traces over OTLP/HTTP to a real collector.
The collector sends the metrics to Prometheus with exemplar storage on
(``--enable-feature=exemplar-storage``), by remote write
(``scripts/otelcol/remotewrite.go``: Debian's Prometheus has no OTLP receiver),
and to VictoriaMetrics; the traces to its debug exporter, whose log shows them.

The test asks ``/slow`` (``time.sleep(0.2)`` in the async handler, which prints
its trace and span ids) ``SLOWS`` times, each once the previous one's stall has
reached Prometheus, then ``/gc`` once (a full collection of 0.15 s or more in
the handler). Checked:

- each slow request is found from an exemplar of
  ``process_metrics.eventloop.stall.duration`` in Prometheus
  (``/api/v1/query_exemplars``): its trace id and span id, the stall's length
  (at least the block), the loop's thread and the handler's function;
- the collection is found likewise from ``process_metrics.cpython.gc.stall.duration``;
- those traces reached the collector: the exemplar links to a trace that exists;
- VictoriaMetrics has the same histograms but stores no exemplars;
- the dashboard panel "Stalls, with their traces" has data from both backends,
  and its exemplar queries find the slow requests' traces in Prometheus.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from opentelemetry.instrumentation.process.probes.gc_pauses import TIMED_BY_INTERPRETER

from ..support.waiting import eventually
from .checks import dashboard_queries
from .launch import APPS, App, uvicorn_args
from .servers import (
    IN_CI,
    VENV_BIN,
    Children,
    Collector,
    Prometheus,
    VictoriaMetrics,
    child_env,
    collector_config,
    free_port,
    wait_until,
)

pytestmark = pytest.mark.e2e

FASTAPI_APP = APPS / "fastapi_app.py"
SLOWS = 3
LOOP_STALL = "process_metrics_eventloop_stall_duration_seconds"
GC_STALL = "process_metrics_cpython_gc_stall_duration_seconds"
PANEL = "Stalls, with their traces"
HANDLER = "fastapi_app.slow"
"""``code.function.name`` of the slow handler: module.qualname of the frame that blocked."""
DEADLINE = 90
"""Seconds to wait for what a step sends to reach a backend, on a loaded machine."""
SLACK = 1.0
"""Seconds a stall may last beyond the block it holds, on a loaded machine."""
GC_SPANS = not TIMED_BY_INTERPRETER
"""Whether a long GC pause carries its span: not where the interpreter times its own
collections (3.15) and no callback runs (docs/runtime.md); the app runs on this Python."""
NO_GC_SPANS = (
    "this interpreter times its own collections: without gc_pause_histogram, "
    "a long pause carries no span (docs/runtime.md)"
)


@dataclass(frozen=True)
class Traced:
    """What one request printed: its span, and the length of its block or collection."""

    trace_id: str
    span_id: str
    seconds: float


@dataclass
class Run:
    app: App
    started: float
    ended: float
    """When the app had stopped: the dashboard's rates are read then."""
    prometheus: Prometheus
    vm: VictoriaMetrics
    collector: Collector
    slow: list[Traced]
    gc: Traced


def _collector_config(grpc: int, http: int, prometheus: Prometheus, vm: VictoriaMetrics) -> str:
    # Prometheus by remote write (exemplars kept), VictoriaMetrics by OTLP; traces printed.
    remotewrite = f"    endpoint: {prometheus.remote_write_url}\n"
    return collector_config(grpc, http, [vm.otlp_url], {"remotewrite": remotewrite}, "debug")


def _has_remote_write(binary: Path) -> None:
    """Skip (fail in CI) with a collector built before ``scripts/otelcol/remotewrite.go``."""
    out = subprocess.run(
        [str(binary), "components"], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    if not re.search(r"^\s*- name: remotewrite$", out, re.M):
        why = (
            f"the collector at {binary} has no remotewrite exporter "
            "(scripts/otelcol/remotewrite.go): run scripts/get-servers.sh to rebuild it"
        )
        if IN_CI:
            pytest.fail(f"CI=true and {why}", pytrace=False)
        pytest.skip(why)


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as answer:
        body: bytes = answer.read()
        return body.decode()


def _traced(line: str) -> Traced:
    found = re.search(r"trace_id=([0-9a-f]{32}) span_id=([0-9a-f]{16}) \w+=([\d.e-]+)", line)
    assert found is not None, line
    return Traced(found[1], found[2], float(found[3]))


def _exemplars(prometheus: Prometheus, expr: str, start: float) -> list[dict[str, Any]]:
    """Every exemplar for ``expr``, flat: its series' labels beside its own."""
    return [
        {**series["seriesLabels"], **e["labels"], "value": float(e["value"]), "ts": e["timestamp"]}
        for series in prometheus.exemplars(expr, start)
        for e in series["exemplars"]
    ]


@pytest.fixture(scope="module")
def run(
    otelcol_binary: Path,
    prometheus: Prometheus,
    vm_prom: VictoriaMetrics,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Run]:
    """The servers, the app, its requests; the app stopped before the tests read."""
    pytest.importorskip("fastapi")
    pytest.importorskip("opentelemetry.instrumentation.fastapi")
    _has_remote_write(otelcol_binary)
    folder = tmp_path_factory.mktemp("exemplars")
    grpc, http = free_port(), free_port()
    config = folder / "otelcol.yaml"
    config.write_text(_collector_config(grpc, http, prometheus, vm_prom))
    collector = Collector(otelcol_binary, config, folder / "otelcol.log", grpc, http)
    children = Children(folder)
    started = time.time()
    with collector.running():
        try:
            port = free_port()
            service = f"e2e-exemplars-{uuid.uuid4().hex[:8]}"
            instance = str(uuid.uuid4())
            # uvloop's loop is not probed (docs/runtime.md)
            argv = [str(VENV_BIN / "uvicorn"), *uvicorn_args("fastapi_app:app", port, "asyncio")]
            env = child_env(
                OTEL_SERVICE_NAME=service,
                OTEL_RESOURCE_ATTRIBUTES=f"service.instance.id={instance}",
                OTEL_EXPORTER_OTLP_ENDPOINT=collector.http_endpoint,
                OTEL_METRIC_EXPORT_INTERVAL="500",
                OTEL_BSP_SCHEDULE_DELAY="200",
            )
            child = children.start("uvicorn-fastapi", argv, env)
            app = App(child, service, instance)

            def up() -> str:
                assert child.alive(), child.describe()
                try:
                    return _get(port, "/")
                except OSError as exc:
                    raise AssertionError(f"not answering yet: {exc}") from exc

            assert wait_until(up, DEADLINE, "the FastAPI app to answer") == "ok"
            loop_stalls = f'{LOOP_STALL}_bucket{{service_name="{service}"}}'
            gc_stalls = f'{GC_STALL}_bucket{{service_name="{service}"}}'

            def arrived(selector: str, request: Traced, spans: bool = True) -> bool:
                if not spans:
                    return bool(prometheus.query(selector))
                found = _exemplars(prometheus, selector, started)
                return any(e["trace_id"] == request.trace_id for e in found)

            slow: list[Traced] = []
            for n in range(1, SLOWS + 1):
                slow.append(_traced(_get(port, "/slow")))
                # One at a time: the SDK keeps one exemplar per bucket and collection.
                wait_until(
                    lambda: arrived(loop_stalls, slow[-1]),
                    DEADLINE,
                    f"the exemplar of /slow #{n} in Prometheus",
                    interval=0.25,
                )
            collected = _traced(_get(port, "/gc"))
            wait_until(
                lambda: arrived(gc_stalls, collected, GC_SPANS),
                DEADLINE,
                "the stall of /gc in Prometheus",
                interval=0.25,
            )
            # By its pid: uvicorn runs the lifespan's shutdown (a last export), then exits.
            status = child.stop(timeout=30)
            assert status in (0, -signal.SIGTERM), child.describe()
            ended = time.time()
            yield Run(app, started, ended, prometheus, vm_prom, collector, slow, collected)
        finally:
            children.stop_all()


def test_each_slow_request_is_found_from_the_loop_stall_exemplar(run: Run) -> None:
    printed = [_traced(line) for line in re.findall(r"^slow .*$", run.app.child.output(), re.M)]
    assert printed == run.slow  # the handler's own lines, each answered and printed once
    selector = f'{LOOP_STALL}_bucket{{service_name="{run.app.service}"}}'
    found = _exemplars(run.prometheus, selector, run.started)
    for request in run.slow:
        mine = [e for e in found if e["trace_id"] == request.trace_id]
        assert len(mine) == 1, (request, found)
        (e,) = mine
        assert e["span_id"] == request.span_id, (request, e)  # the handler's span itself
        assert e["thread_name"] == "MainThread", e
        assert e["code_function_name"] == HANDLER, e
        assert e["service_instance_id"] == run.app.instance, e
        # The stall holds the block, and not much more.
        assert request.seconds <= e["value"] <= request.seconds + SLACK, (request, e)
        # On the bucket that holds its value.
        assert e["value"] <= float(e["le"]), e
    # No other request's span is named as the handler's: the stalls of another
    # function (a loaded machine stalls the loop elsewhere too) carry their own.
    slow_ids = {r.trace_id for r in run.slow}
    named = {e["trace_id"] for e in found if e.get("code_function_name") == HANDLER}
    assert named == slow_ids, found


def test_the_collection_is_found_from_the_gc_stall_exemplar(run: Run) -> None:
    assert run.gc.seconds >= 0.1, run.gc  # else the app could not make a long enough pause
    if not GC_SPANS:
        pytest.skip(NO_GC_SPANS)
    selector = f'{GC_STALL}_bucket{{service_name="{run.app.service}"}}'
    found = _exemplars(run.prometheus, selector, run.started)
    mine = [e for e in found if e["trace_id"] == run.gc.trace_id]
    assert mine, (run.gc, found)
    # The collection of the handler (generation 2), at most as long as the app's bracket
    # of it; smaller ones before it are shorter than 0.1 s or the same span's.
    assert {e["span_id"] for e in mine} == {run.gc.span_id}, mine
    assert {e["cpython_gc_generation"] for e in mine} == {"2"}, mine
    longest = max(e["value"] for e in mine)
    assert 0.1 <= longest <= run.gc.seconds, (run.gc, mine)


def test_the_exemplars_link_to_traces_the_collector_received(run: Run) -> None:
    """The debug exporter logs each span it got: a trace backend behind it would have them."""

    def output() -> str:  # the exporter prints a batch some time after it came
        return run.collector.child.output() if run.collector.child else ""

    for request in [*run.slow, run.gc] if GC_SPANS else run.slow:
        trace = rf"Trace ID\s*: {request.trace_id}\b"
        assert eventually(lambda t=trace: re.search(t, output()) is not None, 30), request
        assert re.search(rf"ID\s*: {request.span_id}\b", output()), request


def test_victoriametrics_has_the_histograms_but_stores_no_exemplars(run: Run) -> None:
    selector = f'{{service_name="{run.app.service}", code_function_name="{HANDLER}"}}'
    count = f"{LOOP_STALL}_count{selector}"
    # Every stall of the handler, counted once, in the same histogram.
    values = wait_until(
        lambda: [float(r["value"][1]) for r in run.vm.query(count)] == [SLOWS],
        DEADLINE,
        f"{SLOWS} stalls of {HANDLER} in VictoriaMetrics",
    )
    assert values
    answer = run.vm.api(
        "/api/v1/query_exemplars",
        [("query", f"{LOOP_STALL}_bucket{selector}"), ("start", f"{run.started:.3f}")],
    )
    assert answer == [], answer  # the API answers, but holds nothing


def test_the_dashboard_panel_finds_the_traces(run: Run) -> None:
    queries = [
        q
        for q in dashboard_queries(variables={"service": run.app.service})
        if q.source.startswith(f"panel {PANEL} / ")
    ]
    assert len(queries) == 2, queries  # the loop's stalls and the GC's
    for q in queries:
        assert run.prometheus.query(q.expr, run.ended), f"{q.source}: no data in Prometheus"
        assert run.vm.query(q.expr, run.ended), f"{q.source}: no data in VictoriaMetrics"
    # What Grafana asks for the exemplars of each query finds the requests' traces.
    loop, collection = queries
    loop_ids = {e["trace_id"] for e in _exemplars(run.prometheus, loop.expr, run.started)}
    assert {r.trace_id for r in run.slow} <= loop_ids, loop_ids
    gc_ids = {e["trace_id"] for e in _exemplars(run.prometheus, collection.expr, run.started)}
    assert run.gc.trace_id in gc_ids or not GC_SPANS, gc_ids
