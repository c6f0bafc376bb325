"""The objects that the defaults add to what every full garbage collection walks.

A full collection of the host walks every GC-tracked object, for the life of
the process: each module, function, class and table row this package keeps
is walked again at each one (issue 37, "garbage cycles" work). The issue
counts, in a fresh interpreter, the objects that ``instrument()`` with the
defaults and two collections add after the SDK and the base instrumentor are
imported (the peer's baseline too): ``COUNT``.

About 900 of them are the SDK's own state of each instrument and point
(aggregations, exemplar reservoirs, locks, the caches of its ``isinstance``
checks), and how many points there are depends on the host (a cgroup limit
turns the cgroup metrics on). So the gate subtracts the SDK's share, counted
for real: the same instruments with the same points, made by a plain
callback each (``SDK_ALONE``). What is left is this package's own: its
modules, tables and state. It is a count, not a timing: for one Python, SDK
and host it is the same at every run.

Which modules the defaults leave out is tested with the other imports
(``tests/test_snapshot.py``, ``_READERS``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import tempfile

import pytest

from .support.forked import python_env

# The measurement, statement for statement.
COUNT = """
import gc, sys
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
import opentelemetry.instrumentation.instrumentor  # the base instrumentor: the peer's baseline too
reader = InMemoryMetricReader(); mp = MeterProvider(metric_readers=[reader])
reader.get_metrics_data()
gc.collect(); before = len(gc.get_objects())
from opentelemetry.instrumentation.process import ProcessInstrumentor
ProcessInstrumentor().instrument(meter_provider=mp)
reader.get_metrics_data(); reader.get_metrics_data()
gc.collect(); print(len(gc.get_objects()) - before)
"""

# Counted once the collector has untracked all it will: collected until the count
# stops falling, before and after. One collection untracks a tuple only when what it
# holds was untracked first, so COUNT depends on the order of the collector's lists,
# which any change moves (by up to 70 objects here); this count does not.
_SETTLED = """
import gc, json, sys
def settled():
    last, count = None, 0
    while count != last:
        gc.collect()
        last, count = count, len(gc.get_objects())
    return count
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Gauge, InMemoryMetricReader, Sum
import opentelemetry.instrumentation.instrumentor
reader = InMemoryMetricReader(); mp = MeterProvider(metric_readers=[reader])
reader.get_metrics_data()
"""

# The defaults, settled; then the kind and the points of each metric they reported.
DEFAULTS = (
    _SETTLED
    + """
before = settled()
from opentelemetry.instrumentation.process import ProcessInstrumentor
ProcessInstrumentor().instrument(meter_provider=mp)
reader.get_metrics_data(); reader.get_metrics_data()
print(settled() - before)
shapes = []
for scope in reader.get_metrics_data().resource_metrics[0].scope_metrics:
    for metric in scope.metrics:
        found = metric.data
        if isinstance(found, Gauge):
            kind = "gauge"
        elif isinstance(found, Sum):
            kind = "counter" if found.is_monotonic else "up_down_counter"
        else:
            continue
        shapes.append((metric.name, kind, [dict(p.attributes) for p in found.data_points]))
print(json.dumps(shapes))
"""
)

# The SDK alone, settled: the same observable instruments with the same points, each
# from a callback made before the count.
SDK_ALONE = (
    _SETTLED
    + """
shapes = json.loads(sys.argv[1])
points = [tuple(Observation(1, attributes) for attributes in p) for _, _, p in shapes]
callbacks = [lambda _options, found=found: found for found in points]
before = settled()
meter = mp.get_meter("sdk-alone")
for (name, kind, _), callback in zip(shapes, callbacks):
    getattr(meter, f"create_observable_{kind}")(name, callbacks=[callback])
reader.get_metrics_data(); reader.get_metrics_data()
print(settled() - before)
"""
)

# What grew: the same run, its objects by the module whose body made them (each
# module's own, without the modules it imports), then all new objects by type.
# Printed when the count is over its bound; run it against the last commit to compare.
WHAT_GREW = """
import collections, gc, importlib.abc, importlib.machinery, sys
def count():
    gc.collect()
    return len(gc.get_objects())
own, nested = {}, []
class Count(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            spec = None if finder is self else finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if isinstance(loader, importlib.machinery.SourceFileLoader):
            def exec_module(module):
                del loader.exec_module  # counted once, and not kept
                nested.append(0)
                start = count()
                try:
                    loader.exec_module(module)
                finally:
                    made, inner = count() - start, nested.pop()
                    own[name] = made - inner
                    if nested:
                        nested[-1] += made
            loader.exec_module = exec_module
        return spec
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
import opentelemetry.instrumentation.instrumentor
reader = InMemoryMetricReader(); mp = MeterProvider(metric_readers=[reader])
reader.get_metrics_data()
sys.meta_path.insert(0, Count())
gc.collect(); before = gc.get_objects(); known = {id(o) for o in before}
from opentelemetry.instrumentation.process import ProcessInstrumentor
ProcessInstrumentor().instrument(meter_provider=mp)
reader.get_metrics_data(); reader.get_metrics_data()
gc.collect()
new = [o for o in gc.get_objects() if id(o) not in known and o is not before]
print(f"{len(new)} new objects; the bodies of {len(own)} modules made {sum(own.values())}:")
for name, n in sorted(own.items(), key=lambda item: -item[1]):
    print(f"{n:6d}  {name}")
print("all new objects by type (most of the SDK's are its state of each point):")
for kind, n in collections.Counter(type(o).__qualname__ for o in new).most_common(25):
    print(f"{n:6d}  {kind}")
"""

BOUNDS = {
    # Most objects of the package's own (the defaults' settled count less the SDK
    # alone's), by Python. Each is the larger of that Python's nox cells (the SDK at its
    # lowest and latest versions) plus 5%: on a host with a cgroup limit the cgroup
    # metrics turn on, whose sources keep state of their own (3%, with saturation=True
    # here). 3.14 adds an __annotate__ function to each annotated function, even under
    # `from __future__ import annotations`; 3.10 and 3.11 import _xxsubinterpreters
    # (63 objects) to tell the main interpreter. Issue 37's goal, at most 2,000 for all
    # of COUNT, SDK included, is not reached (3,169 on 3.11 with the latest SDK).
    # The figures: `.nox/unit-3-11-latest/bin/python -c "import tests.test_objects as t;
    # print(t.counted())"`, after a `nox -s "unit-3.11(latest)"` run.
    "3.10": 2340,  # lowest 2,219, latest 2,222
    "3.11": 2260,  # lowest 2,148, latest 2,151
    "3.12": 2180,  # lowest 2,066, latest 2,069
    "3.13": 2230,  # lowest 2,117, latest 2,120
    "3.13t": 2250,  # latest 2,135
    "3.14": 2890,  # lowest 2,743, latest 2,750
    "3.14t": 2890,  # not measured here (no interpreter): 3.14's, as 3.13t is 3.13's
    "3.15": 2890,  # lowest 2,747, latest 2,727
}


def _python() -> str:
    free = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    return f"{sys.version_info[0]}.{sys.version_info[1]}{free}"


def _run(script: str, *args: str) -> str:
    env = {k: v for k, v in python_env().items() if not k.startswith("OTEL_")}
    # A group of its own, in a directory of its own: it leads and reads the shared sources.
    env["OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="otel-objects-")
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    )
    return done.stdout


def counted() -> dict[str, int]:
    """The counts of a fresh interpreter each: the issue's, then the settled ones."""
    count, shapes = _run(DEFAULTS).splitlines()
    sdk = int(_run(SDK_ALONE, shapes))
    return {
        "issue": int(_run(COUNT)),
        "defaults": int(count),
        "sdk_alone": sdk,
        "own": int(count) - sdk,
        "instruments": len(json.loads(shapes)),
    }


@pytest.mark.skipif(
    sys.implementation.name != "cpython", reason="counts CPython's garbage-collected objects"
)
def test_the_defaults_add_at_most_their_bound_of_gc_tracked_objects() -> None:
    bound = BOUNDS.get(_python())
    found = counted()
    if bound is None:  # a gate that let a new Python through would gate nothing there
        pytest.fail(f"no bound for Python {_python()}: add it to BOUNDS; counted: {found}")
    if found["own"] > bound:
        pytest.fail(
            f"the defaults add {found['own']} GC-tracked objects of their own on Python "
            f"{_python()}, more than {bound}: every full collection of the host walks each "
            f"one (counted: {found}). What grew, by the module that made it and its type "
            f"(tests/test_objects.py, WHAT_GREW; run it against the last commit to "
            f"compare):\n{_run(WHAT_GREW)}",
            pytrace=False,
        )
