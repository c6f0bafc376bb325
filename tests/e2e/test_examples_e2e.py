"""The examples that need real servers, run against them.

- ``examples/otlp/push.py`` through a collector started from
  ``examples/otlp/otelcol-config.yaml``, over gRPC and over HTTP, and straight
  to VictoriaMetrics over OTLP/HTTP;
- every query of ``examples/grafana/process-metrics-dashboard.json`` (as
  ``examples/grafana/queries.py`` extracts them) against VictoriaMetrics with
  Prometheus naming: each must return data for the pushed service.

(The gunicorn example is scenario 5, in ``test_prefork.py``.)
"""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .checks import (
    DASHBOARD_QUERIES,
    PROMETHEUS,
    dashboard_queries,
    default_metrics,
    wait_for_names,
)
from .launch import App, unique_name
from .servers import (
    REPO,
    Children,
    Collector,
    VictoriaMetrics,
    child_env,
    free_port,
)

pytestmark = pytest.mark.e2e

EXAMPLES = REPO / "examples"
PUSH = EXAMPLES / "otlp" / "push.py"
COLLECTOR_CONFIG = EXAMPLES / "otlp" / "otelcol-config.yaml"
QUERIES = DASHBOARD_QUERIES
DASHBOARD = EXAMPLES / "grafana" / "process-metrics-dashboard.json"
SECONDS = "1.5"


def _need(*paths: Path) -> None:
    for path in paths:
        if not path.is_file():
            pytest.skip(f"{path.relative_to(REPO)} is missing")


def _push(children: Children, name: str, service: str, **env: str) -> App:
    """``examples/otlp/push.py``, configured by the standard variables only."""
    child = children.start(
        name,
        [sys.executable, str(PUSH)],
        child_env(
            OTEL_SERVICE_NAME=service,
            OTEL_METRIC_EXPORT_INTERVAL="500",
            EXAMPLE_SECONDS=SECONDS,
            **env,
        ),
    )
    return App(child, service, instance="")


def _prom_names() -> set[str]:
    return {PROMETHEUS.name(m) for m in default_metrics()}


@contextlib.contextmanager
def _port_taken(port: int) -> Iterator[None]:
    """Hold ``port`` on 127.0.0.1 as another collector would; taken already is as good."""
    with socket.socket() as held:
        with contextlib.suppress(OSError):
            held.bind(("127.0.0.1", port))
            held.listen()
        yield


@pytest.fixture(scope="module")
def through_collector(
    otelcol_binary: Path, vm_prom: VictoriaMetrics, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, App]]:
    """The example collector config, then push.py over each protocol, at once."""
    _need(PUSH, COLLECTOR_CONFIG)
    folder = tmp_path_factory.mktemp("otlp-example")
    grpc_port, http_port = free_port(), free_port()
    env = child_env(
        OTLP_GRPC_ENDPOINT=f"127.0.0.1:{grpc_port}",
        OTLP_HTTP_ENDPOINT=f"127.0.0.1:{http_port}",
        BACKEND_OTLP_URL=vm_prom.otlp_url,
        # Its own metrics too: the default port, 8888, is taken by any other collector.
        OTELCOL_TELEMETRY_PORT=str(free_port()),
    )
    collector = Collector(
        otelcol_binary, COLLECTOR_CONFIG, folder / "otelcol.log", grpc_port, http_port, env
    )
    children = Children(folder)
    # A user's own collector holds the default telemetry port (8888): the example still starts.
    with _port_taken(8888), collector.running():
        try:
            apps = {
                "grpc": _push(
                    children,
                    "push-grpc",
                    unique_name("otlp-example-grpc"),
                    OTEL_EXPORTER_OTLP_ENDPOINT=collector.grpc_endpoint,
                ),
                "http/protobuf": _push(
                    children,
                    "push-http",
                    unique_name("otlp-example-http"),
                    OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
                    OTEL_EXPORTER_OTLP_ENDPOINT=collector.http_endpoint,
                ),
            }
            for app in apps.values():
                assert app.child.wait(30) == 0, app.child.describe()
            yield apps
        finally:
            children.stop_all()


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_otlp_example_through_the_example_collector(
    protocol: str, vm_prom: VictoriaMetrics, through_collector: dict[str, App]
) -> None:
    app = through_collector[protocol]
    assert f"({protocol})" in app.child.output()
    selector = PROMETHEUS.selector(service__name=app.service)
    want = _prom_names()
    present = wait_for_names(vm_prom, selector, want)
    assert present == want, f"unexpected: {sorted(present - want)}"


@pytest.fixture(scope="module")
def straight_to_backend(
    vm_prom: VictoriaMetrics, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[App]:
    """push.py over OTLP/HTTP straight to VictoriaMetrics, no collector."""
    _need(PUSH)
    children = Children(tmp_path_factory.mktemp("otlp-direct"))
    try:
        app = _push(
            children,
            "push-direct",
            unique_name("otlp-example-direct"),
            OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=vm_prom.otlp_url,
        )
        assert app.child.wait(30) == 0, app.child.describe()
        yield app
    finally:
        children.stop_all()


def test_otlp_example_straight_to_the_backend(
    vm_prom: VictoriaMetrics, straight_to_backend: App
) -> None:
    selector = PROMETHEUS.selector(service__name=straight_to_backend.service)
    assert vm_prom.names(selector) == _prom_names()


def test_every_dashboard_query_returns_data(
    vm_prom: VictoriaMetrics, straight_to_backend: App
) -> None:
    _need(QUERIES, DASHBOARD)
    queries = [
        q
        for q in dashboard_queries(variables={"service": straight_to_backend.service})
        # The Saturation row needs a limited cgroup: test_saturation_e2e.py runs it
        # against one. Event-loop panels need event_loop=True: test_runtime_e2e.py
        # feeds them from a server. The Workers row needs a master with
        # children=True: test_supervisor.py runs it against one. The stalls row
        # needs gil_wait and event_loop: test_runtime_e2e.py runs it too.
        if q.row not in ("Saturation", "Workers (supervisor mode)", "Where the time went (stalls)")
        and "process_metrics_eventloop_" not in q.expr
    ]
    assert len(queries) >= 10, queries
    empty = [f"{q.source}: {q.expr}" for q in queries if not vm_prom.query(q.expr)]
    assert not empty, "queries without data:\n" + "\n".join(empty)
    # Each query is about the pushed service only: none reads another test's data.
    for q in queries:
        if "service_name" in q.expr and "service_name!=" not in q.expr:
            assert straight_to_backend.service in q.expr, q.expr
