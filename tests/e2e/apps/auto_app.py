"""An application with no SDK code, run under ``opentelemetry-instrument``.

Like most real applications it records one metric of its own through the
OpenTelemetry API (``e2e.app.requests``): that series shows the export pipeline
works even when this package is turned off. ``E2E_SECONDS`` is how long it
works (default 3); it prints ``handled N`` at the end.
"""

from __future__ import annotations

import os
import time

from opentelemetry import metrics

requests = metrics.get_meter("e2e.auto_app").create_counter("e2e.app.requests", unit="{request}")


def main() -> None:
    deadline = time.monotonic() + float(os.environ.get("E2E_SECONDS", "3"))
    handled = 0
    while time.monotonic() < deadline:
        sum(i * i for i in range(20_000))
        requests.add(1)
        handled += 1
        time.sleep(0.02)
    print(f"handled {handled}", flush=True)


if __name__ == "__main__":
    main()
