"""Scenario 2: the same application and checks, over OTLP/gRPC through a real collector.

The collector receives OTLP/gRPC and forwards to both backends over OTLP/HTTP,
so one process is checked under both the dotted and the Prometheus names.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .checks import DOTTED, PROMETHEUS, Naming, check_names, check_prometheus_examples, held
from .launch import App, ballasted_app, check_ballasted, unique_name
from .servers import Children, Collector, VictoriaMetrics

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def app(collector: Collector, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    children = Children(tmp_path_factory.mktemp("collector"))
    try:
        yield ballasted_app(
            children, "grpc", "grpc", collector.grpc_endpoint, unique_name("collector-grpc")
        )
    finally:
        children.stop_all()


def test_every_default_metric_arrives_through_the_collector(vm: VictoriaMetrics, app: App) -> None:
    check_names(vm, DOTTED, app.selector(DOTTED))
    resource = held(vm, DOTTED, app.selector(DOTTED)).resource
    assert resource["service.name"] == app.service


def test_prometheus_naming_through_the_collector(vm_prom: VictoriaMetrics, app: App) -> None:
    check_names(vm_prom, PROMETHEUS, app.selector(PROMETHEUS))
    check_prometheus_examples(vm_prom, app.selector(PROMETHEUS))


@pytest.mark.parametrize("naming", [DOTTED, PROMETHEUS], ids=["dotted", "prometheus"])
def test_values_through_the_collector_are_those_of_the_child(
    naming: Naming, vm: VictoriaMetrics, vm_prom: VictoriaMetrics, app: App
) -> None:
    backend = vm_prom if naming.prometheus else vm
    check_ballasted(backend, naming, app)
