"""The objects that the defaults add to what every full garbage collection walks.

A full collection of the host walks every GC-tracked object, for the life of
the process: each module, function, class and table row this package keeps
is walked again at each one (issue 37, "garbage cycles" work). The count is
taken as the issue takes it, in a fresh interpreter: the objects that
``instrument()`` with the defaults and two collections add, after the SDK
and the base instrumentor are imported (the peer's baseline too). About 900
of them are the SDK's own state of each point and instrument (aggregations,
exemplar reservoirs, locks, the ABC caches of its ``isinstance`` checks).

It is a count, not a timing: for a given Python and SDK it is the same at
every run. Which modules the defaults leave out is tested with the other
imports (``tests/test_snapshot.py``, ``_READERS``).
"""

from __future__ import annotations

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

# What grew: the same run, its objects by the module whose body made them (each
# module's own, without the modules it imports), then what instrument() and the
# collections made beyond the module bodies, by type. Printed when the count is
# over its bound; run it against the last commit to compare.
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
print("all new objects by type (the SDK's state of each point is most of the rest):")
for kind, n in collections.Counter(type(o).__qualname__ for o in new).most_common(25):
    print(f"{n:6d}  {kind}")
"""

BOUNDS = {
    # Most objects the defaults may add, as COUNT counts them, by Python. Issue 37's
    # goal is 2,000: not reached. About 900 are the SDK's state of the default points,
    # and 3.14 adds an __annotate__ function to each annotated function, even under
    # `from __future__ import annotations`. Each bound is the larger count of that
    # Python's nox cells (the SDK at its lowest and latest versions) plus 2%, for the
    # order in which one collection untracks the SDK's nested tuples of attributes.
    # A count: `.nox/unit-3-11-latest/bin/python -c "import tests.test_objects as t;
    # print(t._run(t.COUNT))"` (after a `nox -s "unit-3.11(latest)"` run).
    "3.10": 3620,  # lowest 3,542, latest 3,514; 63 of them the main-interpreter check
    "3.11": 3250,  # lowest 3,130, latest 3,185; 63 of them the main-interpreter check
    "3.12": 3160,  # lowest 3,048, latest 3,092
    "3.13": 3250,  # lowest 3,108, latest 3,181
    "3.13t": 3250,  # latest 3,184
    "3.14": 3870,  # lowest 3,782, latest 3,792
    "3.14t": 3870,  # not measured here (no interpreter): 3.14's, as 3.13t is 3.13's
    "3.15": 3860,  # lowest 3,775, latest 3,765
}


def _python() -> str:
    free = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    return f"{sys.version_info[0]}.{sys.version_info[1]}{free}"


def _run(script: str) -> str:
    env = {k: v for k, v in python_env().items() if not k.startswith("OTEL_")}
    # A group of its own, in a directory of its own: it leads and reads the shared sources.
    env["OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="otel-objects-")
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    )
    return done.stdout


@pytest.mark.skipif(
    sys.implementation.name != "cpython", reason="counts CPython's garbage-collected objects"
)
def test_the_defaults_add_at_most_their_bound_of_gc_tracked_objects() -> None:
    bound = BOUNDS.get(_python())
    if bound is None:  # a gate that let a new Python through would gate nothing there
        pytest.fail(f"no bound for Python {_python()}: count it (COUNT), add it to BOUNDS")
    count = int(_run(COUNT))
    if count > bound:
        pytest.fail(
            f"the defaults add {count} GC-tracked objects on Python {_python()}, more than "
            f"{bound}: every full collection of the host walks each one. What grew, by the "
            "module that made it and its type (tests/test_objects.py, WHAT_GREW; run it "
            f"against the last commit to compare):\n{_run(WHAT_GREW)}",
            pytrace=False,
        )
