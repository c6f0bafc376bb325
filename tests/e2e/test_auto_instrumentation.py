"""Scenario 3: ``opentelemetry-instrument`` with ``opentelemetry-distro``, configured by env only.

Four applications run at once, each with its own ``service.name``:

- ``default``: the documented example app, ``examples/instrument/app.py``;
- ``frequency``: the same with ``OTEL_PYTHON_PROCESS_METRICS_CPU_FREQUENCY=true``;
- ``bad``: the same with a bad value of that variable;
- ``disabled``: an app with one metric of its own (the proof that the pipeline
  works), with ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=process``.

The first three disable the ``system_metrics`` instrumentor, as the example's
docs say to when both packages are installed: its names overlap with ours.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from .checks import DOTTED, default_metrics, held, wait_for_names
from .launch import AUTO_APP, App, auto_instrumented, unique_name
from .servers import REPO, Children, VictoriaMetrics

pytestmark = pytest.mark.e2e

EXAMPLE = REPO / "examples" / "instrument" / "app.py"
FREQUENCY_VAR = "OTEL_PYTHON_PROCESS_METRICS_CPU_FREQUENCY"
SECONDS = "1.5"


def _example() -> Path:
    if not EXAMPLE.is_file():
        pytest.skip(f"{EXAMPLE.relative_to(REPO)} is missing")
    return EXAMPLE


@pytest.fixture(scope="module")
def apps(vm: VictoriaMetrics, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, App]]:
    example = _example()
    children = Children(tmp_path_factory.mktemp("auto"))
    common = {"EXAMPLE_SECONDS": SECONDS, "E2E_SECONDS": SECONDS}
    no_peer = {"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "system_metrics", **common}
    runs = {
        "default": (example, no_peer),
        "frequency": (example, {FREQUENCY_VAR: "true", **no_peer}),
        "bad": (example, {FREQUENCY_VAR: "maybe", **no_peer}),
        "disabled": (AUTO_APP, {"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "process", **common}),
    }
    try:
        started = {
            name: auto_instrumented(
                children, name, script, vm.otlp_url, unique_name(f"auto-{name}"), **env
            )
            for name, (script, env) in runs.items()
        }
        for app in started.values():  # each exports one last time at exit
            assert app.child.wait(30) == 0, app.child.describe()
        yield started
    finally:
        children.stop_all()


def _names(vm: VictoriaMetrics, app: App) -> set[str]:
    return vm.names(app.selector(DOTTED))


def test_metrics_arrive(vm: VictoriaMetrics, apps: dict[str, App]) -> None:
    app = apps["default"]
    assert "handled" in app.child.output()
    want = {m.name for m in default_metrics()}
    present = wait_for_names(vm, app.selector(DOTTED), want)
    assert present == want, f"unexpected: {sorted(present - want)}"
    resource = held(vm, DOTTED, app.selector(DOTTED)).resource
    assert resource["service.name"] == app.service
    assert "system.cpu.frequency" not in present  # off by default


def test_cpu_frequency_when_enabled(vm: VictoriaMetrics, apps: dict[str, App]) -> None:
    app = apps["frequency"]
    wait_for_names(vm, app.selector(DOTTED), {m.name for m in default_metrics()})
    present = _names(vm, app)
    host = psutil.cpu_freq(percpu=True) or []
    provided = {str(n): f.current for n, f in enumerate(host) if f.current}
    if not provided:
        assert "system.cpu.frequency" not in present, "reported on a host that gives no frequency"
        return
    freq = held(vm, DOTTED, app.selector(DOTTED)).by("system.cpu.frequency", "cpu.logical_number")
    assert set(freq) == set(provided), f"CPUs with a frequency: {sorted(freq)} vs {provided}"
    for cpu, hz in freq.items():
        assert 1e7 < hz < 1e11, f"CPU {cpu}: {hz} Hz"
    limits = psutil.cpu_freq()
    for bound, known in (("min", limits.min), ("max", limits.max)):
        name = f"process_metrics.cpu.frequency.{bound}"
        assert (name in present) == bool(known), f"{name} present: {name in present}, host: {known}"


def test_cpu_frequency_absent_by_default(vm: VictoriaMetrics, apps: dict[str, App]) -> None:
    present = wait_for_names(vm, apps["default"].selector(DOTTED), {"process.cpu.time"})
    assert not {"system.cpu.frequency", "process_metrics.cpu.frequency.max"} & present


def test_bad_environment_value_warns_once_and_the_app_runs(
    vm: VictoriaMetrics, apps: dict[str, App]
) -> None:
    app = apps["bad"]
    output = app.child.output()
    warnings = [line for line in output.splitlines() if FREQUENCY_VAR in line]
    assert len(warnings) == 1, output
    assert "maybe" in warnings[0] and "default" in warnings[0]
    assert "handled" in output  # the app ran to its end (and exited 0, see the fixture)
    # The default applies: the metrics arrive, without frequency.
    want = {m.name for m in default_metrics()}
    assert wait_for_names(vm, app.selector(DOTTED), want) == want


def test_disabled_instrumentations_turns_the_package_off(
    vm: VictoriaMetrics, apps: dict[str, App]
) -> None:
    app = apps["disabled"]
    # The pipeline works: the app's own metric arrives.
    present = wait_for_names(vm, app.selector(DOTTED), {"e2e.app.requests"})
    # The system_metrics peer, still enabled here, registers some of the same
    # names; every other metric of this package must be absent.
    try:
        from opentelemetry.instrumentation.system_metrics import _DEFAULT_CONFIG

        peer = set(_DEFAULT_CONFIG)
    except ImportError:
        peer = set()
    ours_only = {m.name for m in default_metrics()} - peer
    assert "process_metrics.refresh.duration" in ours_only
    assert not ours_only & present, f"reported while disabled: {sorted(ours_only & present)}"


# --- a pre-fork server under opentelemetry-instrument ----------------------------

GUNICORN_EXAMPLE = REPO / "examples" / "gunicorn"
AUTO_INTERVAL_MS = 3000
"""Three times what the master takes to load gunicorn.conf.py here (about 1 s), so that on
a loaded machine too the master's provider, set up by opentelemetry-instrument, never
collects before ``on_starting``."""


def test_gunicorn_under_opentelemetry_instrument_reports_each_worker_once(
    vm_prom: VictoriaMetrics, children: Children, service: str
) -> None:
    """``opentelemetry-instrument gunicorn app:application --workers 2`` in examples/gunicorn,
    as a new user types it: gunicorn loads the folder's gunicorn.conf.py by itself."""
    import time

    from .groups import announced, check_once_per_window, shared_samples
    from .servers import VENV_BIN, child_env, free_port, wait_until

    port = free_port()
    start = time.time()
    argv = [str(VENV_BIN / "opentelemetry-instrument"), "gunicorn", "app:application"]
    env = child_env(
        OTEL_SERVICE_NAME=service,
        OTEL_METRICS_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=vm_prom.otlp_url,
        OTEL_METRIC_EXPORT_INTERVAL=str(AUTO_INTERVAL_MS),
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="system_metrics",
        GUNICORN_BIND=f"127.0.0.1:{port}",
    )
    server = children.start("auto-gunicorn", [*argv, "--workers", "2"], env, cwd=GUNICORN_EXAMPLE)
    workers = wait_until(
        lambda: len(announced(server.output())) == 2 and announced(server.output()),
        30,
        "two workers",
    )
    out = server.output()
    assert f"master {server.pid}: process metrics off here" in out, out
    assert "Attempting to instrument while already instrumented" not in out, out
    assert {w.slot for w in workers} == {0, 1}, workers
    ours = {w.instance for w in workers}

    def reported() -> set[str]:
        vm_prom.flush()
        series = vm_prom.api(
            "/api/v1/series",
            [("match[]", f'{{service_name="{service}"}}'), ("start", f"{start:.3f}")],
        )
        found = {s.get("service_instance_id", "(none)") for s in series}
        assert found == ours, f"instances in the backend {found}, the workers' {ours}"
        return found

    wait_until(reported, 30, "both workers, and only them, in the backend")
    time.sleep(4 * AUTO_INTERVAL_MS / 1000)
    reported()  # still only the workers: the master, and the providers they inherited, say nothing
    check_once_per_window(shared_samples(vm_prom, service, start), AUTO_INTERVAL_MS, exits=0)
    assert server.stop() == 0, server.describe()
    reported()
