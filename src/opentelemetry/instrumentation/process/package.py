# psutil is a dependency, not an instrumented library: an empty tuple means
# `opentelemetry-instrument` never skips this package over a version check.
_instruments: tuple[str, ...] = ()

_supports_metrics = True
