"""The skips a run may have: each names a missing platform, server, package or host feature.

A skip whose reason matches none of these fails the run (tests/conftest.py), so
that a test cannot skip in every cell of ``make test`` unnoticed, as the fault
cases of the event-loop source once did ("reports nothing on this host").
A new skip in a test needs its reason here, with what it waits for.
"""

from __future__ import annotations

import re

import pytest

EXPECTED: dict[str, str] = {
    # Platforms: the test needs an OS feature this one lacks.
    r"^(Linux readers|Linux only|Linux-only sources|reads procfs|reads /proc)$": "platform",
    r"^reads /proc/self/task and thread CPU clocks$": "platform",
    r"^namespaces and /proc are Linux-only$": "platform",
    r"^netlink sock_diag is Linux-only$": "platform",
    r"^(the direct read is|direct reads are) Linux-only$": "platform",
    r"^(needs os\.fork|needs fork|gunicorn needs fork|needs CPU affinity)$": "platform",
    r"^POSIX file descriptors$": "platform",
    r"^real-time signals are POSIX\.1b$": "platform",
    r"^smaps_rollup is Linux only$": "platform",
    r"^(getrusage\(2\)|getrusage\(\) is POSIX only|iowait is a Linux field)$": "platform",
    r"^(forks from C through glibc|times the child with CLOCK_BOOTTIME \(Linux\))$": "platform",
    r"^(counts the opens of /proc files|counts descriptors|sleeping threads .* in /proc)$": (
        "platform"
    ),
    r"^psutil has no cpu_freq here$": "platform",
    r"^psutil\.net_connections\(\) needs root on macOS": "platform",
    r"^stops the example with SIGTERM, which Windows cannot send$": "platform",
    r"^sends SIGINT, which Windows cannot send$": "platform",
    r"^the names of other hosts are checked with a faked platform below$": "platform",
    r"^no garbage-collection pauses here \(not CPython\)$": "platform",
    r"^counts CPython's garbage-collected objects$": "platform",
    r"^no subinterpreters here: neither _testcapi nor concurrent\.interpreters$": "platform",
    r"^could not import '_testcapi'": "platform",  # Debian's 3.14 and 3.15 leave it out
    r"^this platform reports none of ": "platform",
    r"^got empty parameter set ": "platform",  # every case of a test unsupported here
    r"^(cgroups are Linux only|forks and reads /proc)$": "platform",
    r"^process\.signals_pending is Linux-only \(/proc/self/status\)$": "platform",
    # Host features: cgroups, swap, privileges, namespaces.
    r"^a swap file needs root": "host",
    r"^needs root to drop to nobody$": "host",
    r"^needs root(, to setuid| to become another user| to mount)$": "host",
    r"^needs root to give a directory away$": "host",
    r"^needs root to raise a process's priority \(nice -20\)$": "host",
    r"^reusing a pid on purpose needs root \(ns_last_pid\)$": "host",
    r"^another process took the freed pid each time$": "host",
    r"^cannot mount a tmpfs: ": "host",
    r"^creating a cgroup and moving a process into it needs root$": "host",
    r"^this host has nothing for \S+ to read \(no such device or cgroup\)$": "host",
    r"^this kernel has no /proc/pressure": "host",
    r"^this process is in a non-root v2 cgroup: its own pressure is read$": "host",
    r"^no mounted cgroup hierarchy for ": "host",
    r"^no (cgroup )?v1 memory controller here$": "host",
    r"^no memory controller in this v2 cgroup$": "host",
    r"^this process is in a limited cgroup": "host",
    r"^swapon refused a swap file here": "host",
    r"^no swap on this host": "host",
    r"^no private namespace here": "host",
    r"^the host has too little memory for a limit well below it$": "host",
    # Servers, browsers and packages that the cell does not have.
    r"^(victoria-metrics|otelcol|prometheus) not found: set ": "server",
    r"^(VICTORIA_METRICS_BIN|OTELCOL_BIN|PROMETHEUS_BIN)=.* is not an executable file$": "server",
    r"^OpenTelemetry Collector unavailable \(": "server",
    # A collector built before scripts/otelcol/remotewrite.go: get-servers.sh rebuilds it.
    r"^the collector at \S+ has no remotewrite exporter": "server",
    r"^DOCS NOT CHECKED IN A BROWSER: ": "browser",
    r"^make is not installed$": "package",
    r"^patch is not installed$": "package",
    r"^uwsgi not found: ": "package",
    r"^celery is not installed": "package",
    r"^uvloop is not installed$": "package",
    # opentelemetry-exporter-prometheus 0.49b0, the lowest allowed: later ones label right.
    r"^this Prometheus exporter mislabels points of mixed attributes: ": "package",
    r"^the peer instrumentor is not installed in this venv \(a matrix cell's\)$": "package",
    r"^the docs extra is not installed$": "package",
    r"^hatchling is not installed \(it comes with the test extra\)$": "package",
    r"^could not import '[\w.]+'": "package",  # importorskip() without a reason
    r" is missing$": "file",  # an example the sdist may leave out
    r"^no interpreters in .+/bin \(make pythons\)$": "package",
    # make pythons' 3.13t leaves out CPython's test suite (scripts/get-pythons.sh).
    r"^this interpreter has no CPython test suite \(test\.libregrtest\)$": "version",
    # Versions of the cell: the lowest allowed SDK and conventions; the build of Python.
    r"^needs a free-threaded build$": "version",
    r"^needs an interpreter that (does not )?times? its own collections": "version",
    r"^needs a build with a GIL$": "version",
    r"^this interpreter times its own collections: without gc_pause_histogram, ": "version",
    r"^the host kept the GIL's holder off a CPU: ": "host",
    r"^a fork from C beside running threads may hang on a free-threaded build$": "version",
    r"^a free-threaded build's allocations here start few automatic collections$": "version",
    r"^the free-threaded allocator returns freed memory in the background": "version",
    r"^the installed opentelemetry-semantic-conventions predates": "version",
    r"^reading pyproject\.toml needs Python 3\.11\+$": "version",
    r"^the docs quote SDK 1\.45's memory per attribute set; this is ": "version",
    r"^the README quotes SDK 1\.45's default exporter timeout; this is ": "version",
    r"^this SDK's readers take no cardinality_limits": "version",
    r"^the proposed fix is a diff against SDK \S+; this is ": "version",
    r"^the demo installs the latest releases; this cell has the lowest ones$": "version",
    # A race with the interpreter's own GC: rare, never in every cell.
    r"^a collection of its own came in between": "race",
}
"""Regular expression of a skip reason -> what the skip waits for."""

_PATTERNS = [re.compile(p) for p in EXPECTED]


def reason(report: pytest.TestReport) -> str:
    """The reason a skipped test gave, without pytest's ``Skipped: `` prefix."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def expected(text: str) -> bool:
    """Whether a skip with this reason is one of the expected ones."""
    return category(text) is not None


def category(text: str) -> str | None:
    """What a skip with this reason waits for (platform, server...), or None if unexpected."""
    for pattern, what in zip(_PATTERNS, EXPECTED.values(), strict=True):
        if pattern.search(text):
            return what
    return None


LOUD = {"server", "browser"}
"""Skips shown in full even in a quiet run: each says how to get what it lacks."""
