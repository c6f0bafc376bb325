"""A resource detector that gives each worker of a pre-fork server a stable identity.

``ProcessWorkerResourceDetector`` claims a worker slot (``group/slots.py``)
and sets ``service.instance.id`` to a UUIDv5 of the host, the parent and the
slot, so a worker that replaces a recycled one keeps the same series. It is
the ``process_worker`` entry point of ``opentelemetry_resource_detector``
(``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=process_worker``), or is called in a
``post_fork`` hook. This module needs the OpenTelemetry SDK; the rest of the
package does not import it.
"""

from __future__ import annotations

import logging
import uuid

from opentelemetry.sdk.resources import Resource, ResourceDetector

from .group import SLOT_ATTRIBUTE, keys, slots
from .group.rundir import faults

NAMESPACE = uuid.UUID("5b0f7e1c-3d55-4c1e-9f43-0c9a6f5d2b71")
"""The UUIDv5 namespace of the ``service.instance.id`` values this detector makes."""

_logger = logging.getLogger(__name__)


def instance_id(host_id: str, parent_key: str, slot: int) -> str:
    """The ``service.instance.id`` of slot ``slot`` under ``parent_key`` on ``host_id``."""
    return str(uuid.uuid5(NAMESPACE, f"{host_id}/{parent_key}/{slot}"))


class ProcessWorkerResourceDetector(ResourceDetector):
    """``service.instance.id`` and ``process_metrics.worker.slot`` of this worker.

    An empty resource, and one warning, when no slot can be claimed (no safe
    runtime directory): the SDK's own ``service.instance.id`` then applies.
    """

    def detect(self) -> Resource:
        found = slots.claim()
        if found is None:
            faults.warning(
                ("detector", "no slot"),
                "process metrics: no worker slot could be claimed; the process_worker "
                "resource detector adds no service.instance.id.",
            )
            return Resource.get_empty()
        return Resource(
            {
                "service.instance.id": instance_id(keys.host_id(), found.parent_key, found.slot),
                SLOT_ATTRIBUTE: found.slot,
            }
        )

    def is_process_dependent(self) -> bool:
        """True: a forked child is another worker, with a slot of its own (SDK 1.44+)."""
        return True
