"""Where one collection of ours spends its time, part by part, timed like the main run.

The parts are timed separately (paused and interleaved, like everything else):

- ``collect``: ``get_metrics_data()``, the whole thing;
- ``callbacks``: our instrument callbacks called in a row, as the SDK calls them,
  without the SDK: the refresh plus turning readings into observations;
- ``refresh``: the snapshot refresh alone (every source, inside one oneshot);
- ``observe``: observations from an existing snapshot, without the refresh;
- ``bare``: the same OS reads, each once, in a plain function;
- ``floor``: the SDK with constant callbacks of the same shape;
- ``source:<name>``: one source alone (cold, so their sum exceeds ``refresh``).

So ``collect - callbacks`` is what the SDK costs on our observations, and
``callbacks - bare`` is our own Python beyond the data source.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.metrics import CallbackOptions
from opentelemetry.sdk.metrics.export import MetricsData

import configs
import subjects
import timing
from opentelemetry.instrumentation.process.instruments import _registries
from opentelemetry.instrumentation.process.sources import ReadContext, Source


def _source_reader(cache: Any, source: Source) -> Callable[[], object]:
    def read() -> object:
        # A throwaway baseline: the live one is left alone.
        ctx: ReadContext = dataclasses.replace(
            cache._ctx, now=time.monotonic(), deltas={}, floors={}
        )
        if source.in_process:
            with ctx.process.oneshot():
                return source.read(ctx)
        return source.read(ctx)

    return read


def parts(name: str) -> tuple[dict[str, Callable[[], object]], list[subjects.Subject]]:
    system = name == "default"
    ours = subjects.ours(name, configs.ours()[name])
    ours.measure_shape()
    assert ours.live is not None and ours.reader is not None and ours.provider is not None
    live = ours.live
    data = ours.reader.get_metrics_data()
    assert isinstance(data, MetricsData)
    floor = subjects.floor_like("floor", data, "")
    observers = [_registries[ours.provider].observers[m.name] for m in live.metrics]
    options = CallbackOptions()

    def callbacks() -> None:
        for observer in observers:
            observer(options)

    def observe() -> None:
        snap = live.cache.snapshot(0)
        for metric in live.metrics:
            live.observe(metric, snap)

    fns: dict[str, Callable[[], object]] = {
        "collect": ours.collect,
        "callbacks": callbacks,
        "refresh": live.cache._refresh,
        "observe": observe,
        "bare": subjects.bare_reads(system),
        "floor": floor.collect,
    }
    for source in live.cache.sources:
        fns[f"source:{source.name}"] = _source_reader(live.cache, source)
    return fns, [ours, floor]


def breakdown(name: str, rounds: int, pause: float) -> dict[str, Any]:
    fns, owned = parts(name)
    rng = random.Random(5)
    values: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns)
    # These parts share the live cache's utilisation baseline: keep them MIN_GAP apart.
    shared = {"collect", "callbacks", "refresh"}
    last_shared = -1e9
    try:
        for _ in range(rounds):
            rng.shuffle(order)
            for part in order:
                wait = pause
                if part in shared:
                    wait = max(pause, timing.MIN_GAP - (time.perf_counter() - last_shared))
                time.sleep(wait)
                t0 = time.perf_counter()
                fns[part]()
                values[part].append(time.perf_counter() - t0)
                if part in shared:
                    last_shared = t0
        # The same parts back to back (warm caches), for contrast.
        warm: dict[str, float] = {}
        for part, fn in fns.items():
            runs = []
            for _ in range(max(3, rounds)):
                t0 = time.perf_counter()
                fn()
                runs.append(time.perf_counter() - t0)
            warm[part] = statistics.median(runs)
    finally:
        for s in owned:
            s.close()
    return {
        "paused": {k: statistics.median(v) for k, v in values.items()},
        "warm": warm,
    }
