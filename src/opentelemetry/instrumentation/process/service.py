"""Which service a meter provider exports: the identity that one group of processes shares.

With ``shared_metrics="once"`` the processes that export the same service (in
one cgroup, for one user) elect one reporter of the shared metrics, so that a
second service in the same container, a cron job or a management command
never takes the role, and the metrics, away from it. The identity is read
from the resource of the provider: the attributes of :data:`IDENTITY`. The
SDK's ``MeterProvider`` keeps its resource in a private attribute: it is
feature-detected, and where it cannot be read (another SDK, or a provider not
set yet behind the API's proxy) the standard environment variables stand in.

A program that never named itself has the SDK's default name,
``unknown_service...``, as any other such program of the user: the command
line then tells it apart (``program=``, see ``group.keys.program``), so that
two unrelated programs never take each other's shared metrics, while the
workers of one server, which share their parent's command line, still elect
one reporter.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

IDENTITY = ("service.namespace", "service.name", "deployment.environment.name")
"""The resource attributes that name one deployed service, as a backend tells services apart.

Where the metrics are sent (the exporter's endpoint) is not part of it: the
package cannot see it in general (several readers, a pull exporter, a local
collector that fans out), and two deployments of one service that must each
report the host metrics have different environments or namespaces.
``shared_metrics="every"``, or a runtime directory of their own, separates
any others (docs/prefork.md).
"""

UNKNOWN = "unknown_service"
"""The service name of a resource that has none (as the SDK's default begins)."""


def identity(provider: Any) -> str:
    """The service ``provider`` exports, as ``name=value`` pairs of :data:`IDENTITY`, in order.

    Attributes that are not set are left out, except ``service.name``; a name
    that is none or the SDK's default is followed by ``program=`` and this
    program's command line, as ``group.keys.program`` tells it.
    """
    attributes = _resource_attributes(provider)
    if attributes is None:
        attributes = from_environment(os.environ)
    name = str(attributes.get("service.name") or "")
    if not name:
        attributes = {**attributes, "service.name": UNKNOWN}
    found = " ".join(f"{k}={attributes[k]}" for k in IDENTITY if attributes.get(k))
    if name and not name.startswith(UNKNOWN):
        return found
    from .group.keys import program  # the group code, only for a group (shared_metrics="once")

    return f"{found} program={program()}"


def _resource_attributes(provider: Any) -> Mapping[str, Any] | None:
    real = getattr(provider, "_real_meter_provider", provider)  # the API's proxy, once set
    resource = getattr(getattr(real, "_sdk_config", None), "resource", None)
    attributes = getattr(resource, "attributes", None)
    return attributes if isinstance(attributes, Mapping) else None


def from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """:data:`IDENTITY` from ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME`` (which wins).

    As the SDK reads them: comma-separated ``key=value`` pairs, values percent-decoded.
    """
    from urllib.parse import unquote  # only without a readable resource

    found: dict[str, str] = {}
    for pair in environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, sep, value = pair.partition("=")
        if sep and key.strip() in IDENTITY:
            found[key.strip()] = unquote(value.strip())
    name = environ.get("OTEL_SERVICE_NAME", "").strip()
    if name:
        found["service.name"] = name
    return found
