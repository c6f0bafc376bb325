"""Start the instrumented applications the scenarios run, as child processes."""

from __future__ import annotations

import re
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from .checks import Naming, check_names, check_process_values
from .servers import VENV_BIN, Child, Children, VictoriaMetrics, child_env

APPS = Path(__file__).resolve().parent / "apps"
PUSH_APP = APPS / "push_app.py"
AUTO_APP = APPS / "auto_app.py"


def unique_name(hint: str) -> str:
    """A ``service.name`` no other test uses: tests share servers, told apart by it."""
    return f"e2e-{re.sub(r'[^a-zA-Z0-9]+', '-', hint).strip('-')[:40]}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class App:
    """A running application and the identity its metrics carry."""

    child: Child
    service: str
    instance: str

    def selector(self, naming: Naming) -> str:
        return naming.selector(service__name=self.service, service__instance__id=self.instance)


def push_app(
    children: Children,
    name: str,
    protocol: str,
    endpoint: str,
    service: str,
    *,
    interval_ms: int = 500,
    **env: str,
) -> App:
    """``apps/push_app.py``: instrumented in code, OTLP over ``protocol`` to ``endpoint``."""
    instance = str(uuid.uuid4())
    child = children.start(
        name,
        [sys.executable, str(PUSH_APP), protocol],
        child_env(
            OTEL_SERVICE_NAME=service,
            OTEL_RESOURCE_ATTRIBUTES=f"service.instance.id={instance}",
            OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=endpoint,
            OTEL_METRIC_EXPORT_INTERVAL=str(interval_ms),
            **env,
        ),
    )
    return App(child, service, instance)


BALLAST_MB = 64
"""Memory that :func:`ballasted_app` holds, in MiB."""
BURN_S = 0.3
"""CPU time that :func:`ballasted_app` burns, in seconds."""


def ballasted_app(children: Children, name: str, protocol: str, endpoint: str, service: str) -> App:
    """:func:`push_app` holding ``BALLAST_MB`` of memory and having burned ``BURN_S`` of CPU."""
    return push_app(
        children,
        name,
        protocol,
        endpoint,
        service,
        E2E_BALLAST_MB=str(BALLAST_MB),
        E2E_BURN_S=str(BURN_S),
    )


def check_ballasted(backend: VictoriaMetrics, naming: Naming, app: App) -> None:
    """Every default name arrived, and the values are those of the :func:`ballasted_app`."""
    check_names(backend, naming, app.selector(naming))  # waits for the data
    assert app.child.rss() > BALLAST_MB << 20
    check_process_values(backend, naming, app.selector(naming), app.child.pid, min_cpu=BURN_S * 0.9)


def auto_instrumented(
    children: Children, name: str, script: Path, endpoint: str, service: str, **env: str
) -> App:
    """``opentelemetry-instrument python script``, configured only by the environment."""
    instance = str(uuid.uuid4())
    child = children.start(
        name,
        [str(VENV_BIN / "opentelemetry-instrument"), "python", str(script)],
        child_env(
            OTEL_SERVICE_NAME=service,
            OTEL_RESOURCE_ATTRIBUTES=f"service.instance.id={instance}",
            OTEL_METRICS_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=endpoint,
            OTEL_METRIC_EXPORT_INTERVAL="500",
            **env,
        ),
    )
    return App(child, service, instance)


def uvicorn_args(app: str, port: int, loop: str) -> list[str]:
    """uvicorn's arguments after its name: ``app`` of :data:`APPS` on 127.0.0.1:``port``."""
    where = ["--app-dir", str(APPS), "--host", "127.0.0.1", "--port", str(port)]
    return [app, *where, "--loop", loop, "--no-access-log"]
