"""Fixtures for the end-to-end tests: real servers on 127.0.0.1, started once per session.

Binaries come from ``VICTORIA_METRICS_BIN`` / ``OTELCOL_BIN`` / ``PROMETHEUS_BIN`` or the cache
that ``scripts/get-servers.sh`` fills. A missing binary skips its tests with a
message saying how to get it, except in CI (``CI=true``), where a missing
server is a failure, whatever the reason. Outside CI, a collector whose build
failed for a reason outside the project (the script leaves
``otelcol.unavailable``) skips the collector tests, and the reason is printed
in a banner at the end of the run.

Tests share the servers and tell their data apart by resource attributes
(``service.name``, ``service.instance.id``), which become labels.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .launch import unique_name
from .servers import (
    IN_CI,
    OTELCOL_UNAVAILABLE,
    Children,
    Collector,
    Prometheus,
    VictoriaMetrics,
    collector_config,
    free_port,
    locate,
)


def _collector_unavailable() -> str | None:
    """The recorded reason the collector could not be built, if it could not."""
    if locate("OTELCOL_BIN", "otelcol")[0] is not None or not OTELCOL_UNAVAILABLE.is_file():
        return None
    return OTELCOL_UNAVAILABLE.read_text(errors="replace").strip()


@pytest.fixture(scope="session")
def vm_binary() -> Path:
    path, why = locate("VICTORIA_METRICS_BIN", "victoria-metrics")
    if path is None:
        if IN_CI:
            pytest.fail(f"CI=true and VictoriaMetrics is missing: {why}", pytrace=False)
        pytest.skip(why)
    return path


@pytest.fixture(scope="session")
def otelcol_binary() -> Path:
    path, why = locate("OTELCOL_BIN", "otelcol")
    if path is not None:
        return path
    reason = _collector_unavailable()
    if reason is not None:
        first = " / ".join(line for line in reason.splitlines()[:2])
        why = f"OpenTelemetry Collector unavailable ({first}); see the banner below"
    if IN_CI:
        # CI must not pass without the collector tests, even when the build
        # failed for a reason outside the project.
        pytest.fail(f"CI=true and the collector is missing: {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def prometheus_binary() -> Path:
    path, why = locate("PROMETHEUS_BIN", "prometheus")
    if path is None:
        if IN_CI:
            pytest.fail(f"CI=true and Prometheus is missing: {why}", pytrace=False)
        pytest.skip(why)
    return path


@pytest.fixture(scope="session")
def prometheus(
    prometheus_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    """Prometheus storing exemplars, fed by remote write."""
    server = Prometheus(prometheus_binary, tmp_path_factory.mktemp("prometheus"))
    with server.running():
        yield server


def _vm(
    binary: Path, factory: pytest.TempPathFactory, name: str, prometheus_naming: bool
) -> Iterator[VictoriaMetrics]:
    folder = factory.mktemp(name)
    server = VictoriaMetrics(binary, folder / "data", folder / "vm.log", prometheus_naming)
    with server.running():
        yield server


@pytest.fixture(scope="session")
def vm(vm_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VictoriaMetrics]:
    """VictoriaMetrics keeping the names as sent: dotted, semantic-convention names."""
    yield from _vm(vm_binary, tmp_path_factory, "vm-dotted", prometheus_naming=False)


@pytest.fixture(scope="session")
def vm_prom(vm_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VictoriaMetrics]:
    """VictoriaMetrics translating names to Prometheus style, as dashboards query them."""
    yield from _vm(vm_binary, tmp_path_factory, "vm-prom", prometheus_naming=True)


@pytest.fixture(scope="session")
def collector(
    otelcol_binary: Path,
    vm: VictoriaMetrics,
    vm_prom: VictoriaMetrics,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Collector]:
    """A collector receiving OTLP (gRPC and HTTP) and forwarding to both backends."""
    folder = tmp_path_factory.mktemp("otelcol")
    grpc_port, http_port = free_port(), free_port()
    config = folder / "config.yaml"
    config.write_text(collector_config(grpc_port, http_port, [vm.otlp_url, vm_prom.otlp_url]))
    server = Collector(otelcol_binary, config, folder / "otelcol.log", grpc_port, http_port)
    with server.running():
        yield server


@pytest.fixture
def children(tmp_path: Path) -> Iterator[Children]:
    """Processes started by one test; all of them stopped after it, pass or fail."""
    group = Children(tmp_path)
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture
def service(request: pytest.FixtureRequest) -> str:
    """A service.name no other test uses."""
    return unique_name(request.node.name)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say loudly, at the very end, why the collector tests were skipped."""
    reason = _collector_unavailable()
    if reason is None:
        return
    write = terminalreporter.write_line
    terminalreporter.section("OPENTELEMETRY COLLECTOR UNAVAILABLE", sep="!", red=True, bold=True)
    verdict = "FAILED (CI=true)" if IN_CI else "SKIPPED"
    write(f"The collector tests {verdict}: building the collector failed for this reason,")
    write(f"recorded by scripts/get-servers.sh in {OTELCOL_UNAVAILABLE}:")
    for line in reason.splitlines():
        write(f"    {line}")
    write("To retry the build: bash scripts/get-servers.sh --refresh")
    terminalreporter.write_sep("!", red=True, bold=True)
