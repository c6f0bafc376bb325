"""Scenario 1: ``ProcessInstrumentor().instrument()`` in code, OTLP/HTTP straight to the backend.

Two copies of the same application run side by side: one pushes to a
VictoriaMetrics that keeps the dotted semantic-convention names, the other to
one that translates them to Prometheus names. Each is checked against what the
OS says about that very process.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .checks import DOTTED, PROMETHEUS, Naming, check_names, check_prometheus_examples, held
from .launch import App, ballasted_app, check_ballasted, unique_name
from .servers import Children, VictoriaMetrics

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def apps(
    vm: VictoriaMetrics, vm_prom: VictoriaMetrics, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, App]]:
    children = Children(tmp_path_factory.mktemp("programmatic"))
    backends = {"dotted": vm, "prometheus": vm_prom}
    try:
        yield {
            naming: ballasted_app(
                children, naming, "http", backend.otlp_url, unique_name(f"programmatic-{naming}")
            )
            for naming, backend in backends.items()
        }
    finally:
        children.stop_all()


def test_every_default_metric_arrives_under_its_semantic_convention_name(
    vm: VictoriaMetrics, apps: dict[str, App]
) -> None:
    app = apps["dotted"]
    check_names(vm, DOTTED, app.selector(DOTTED))
    resource = held(vm, DOTTED, app.selector(DOTTED)).resource
    assert resource["service.name"] == app.service
    assert resource["service.instance.id"] == app.instance


def test_prometheus_naming_translation(vm_prom: VictoriaMetrics, apps: dict[str, App]) -> None:
    app = apps["prometheus"]
    check_names(vm_prom, PROMETHEUS, app.selector(PROMETHEUS))
    check_prometheus_examples(vm_prom, app.selector(PROMETHEUS))


@pytest.mark.parametrize("naming", [DOTTED, PROMETHEUS], ids=["dotted", "prometheus"])
def test_values_are_those_of_the_child_process(
    naming: Naming, vm: VictoriaMetrics, vm_prom: VictoriaMetrics, apps: dict[str, App]
) -> None:
    app = apps["prometheus" if naming.prometheus else "dotted"]
    backend = vm_prom if naming.prometheus else vm
    check_ballasted(backend, naming, app)
