"""Instruments each pyperf worker as an application would be: ``benchmarks/overhead.py``.

This folder goes on ``PYTHONPATH``, and pyperf passes it and
``PROCESS_OVERHEAD_MODE`` on to its workers (``--inherit-environ``). In a
worker, before the benchmark's own code runs, ``appmode.setup`` sets up the
mode. pyperf's master process (no ``--worker`` argument) is left alone.

With ``"clock": "cpu"`` in the mode, the values are CPU seconds of the whole
worker process (every thread's: the export thread's work counts, other
tenants' of the machine do not) instead of wall seconds: pyperf and the
benchmarks read ``time.perf_counter`` (``pyperf.perf_counter`` is the same
function) at each call, and it becomes ``time.process_time``.

With ``"phase": true``, the worker then sleeps a random fraction of one export
interval, so that the benchmark's values start at a random point between two
collections and hold, on average, as many collections per second as the
interval gives. Each worker appends one JSON line (its pid, the mode's name,
whether it is instrumented) to ``$PROCESS_OVERHEAD_MARKS``: the benchmark
checks that every worker ran the mode it was given.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

import appmode

_mode = appmode.from_env() if "--worker" in sys.argv else None
if _mode is not None:
    if _mode.get("clock") == "cpu":
        import pyperf

        time.perf_counter = pyperf.perf_counter = time.process_time  # type: ignore[misc]
    _provider = appmode.setup(_mode)  # kept alive for the worker's life
    _marks = os.environ.get("PROCESS_OVERHEAD_MARKS")
    if _marks:
        with open(_marks, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), **appmode.describe(_mode)}) + "\n")
    if _mode.get("phase"):
        time.sleep(random.uniform(0, float(_mode["interval_ms"]) / 1000))
