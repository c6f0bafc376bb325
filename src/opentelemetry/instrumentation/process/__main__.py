"""``python -m opentelemetry.instrumentation.process``: what this package reports here.

Takes one snapshot of the metrics the options enable and prints a line per
metric, then what it found: the cgroup and its limits, the pressure stall
files, the CPUs available, and the metrics that are off, and why. The
``OTEL_PYTHON_PROCESS_METRICS_*`` variables apply; ``OPTION=VALUE`` arguments
override them. It needs neither the SDK nor an exporter: the points come
from the package's own instruments side (``Instrumentation.observe``).

The snapshot is taken :data:`WINDOW` seconds after the start, so that the
utilisations cover that second rather than a few microseconds; with
``--every N`` each later one covers the N seconds since the one before. The
``process.*`` and ``cpython.*`` values are this command's own process; the
host, cgroup and pressure ones are shared with every process here, and this
command reads them itself (``shared_metrics="every"``), so that it never
takes the role of another process of the group.

``--json`` prints each snapshot as one JSON object on one line; its shape is
documented in docs/getting-started.md ("See it first") and held by the tests.
The readable form prints what it found once, under the first snapshot.

A bad argument is argparse's error (status 2), showing at most a 200-character
excerpt of it; a failed write to standard output (a full disk) is one line on
standard error and status :data:`WRITE_ERROR`, as ``cat`` says it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import textwrap
import time
from collections.abc import Mapping, Sequence
from typing import Any

import psutil

from .catalog import supported
from .environment import ENV_VARS, from_environment, resolve
from .excerpt import excerpt
from .facts import Facts
from .group.election import reporters
from .instruments import Instrumentation
from .metrics import METRICS, Metric
from .options import OPTION_NAMES, ProcessMetricsOptions, declared, matches
from .printer import Point, footnotes, readable, table
from .version import __version__

PROG = "python -m opentelemetry.instrumentation.process"
WINDOW = 1.0
"""Seconds between the start and the first snapshot: what its utilisations cover."""
JSON_FORMAT = 1
"""The version of the ``--json`` shape; a change that removes or renames a key raises it."""
WRITE_ERROR = 74
"""The exit status when standard output cannot be written: ``EX_IOERR`` of sysexits.h."""
FORCED = {"shared_metrics": "every"}
"""Options this command sets itself, whatever the arguments and the environment say."""

ARGUMENT, ENVIRONMENT, DEFAULT, COMMAND = "argument", "environment", "default", "this command"

WIDTH = 100
"""Columns of the readable form's wrapped lines."""

# Why a source that the options turn on has nothing to read here (its open hook said so).
IDLE = {
    "cgroup_cpu": "no cgroup CPU quota or memory limit applies (saturation=None, auto)",
    "cgroup_memory": "no cgroup CPU quota or memory limit applies (saturation=None, auto)",
    "pressure": "no pressure stall files (neither the cgroup's *.pressure nor /proc/pressure)",
}
PRESSURE_SCOPE = "process_metrics.pressure.scope"


def parser() -> argparse.ArgumentParser:
    """The command line: ``OPTION=VALUE`` arguments, ``--json``, ``--every``, ``--options``."""
    named = ", ".join(ENV_VARS)
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Print one snapshot of the process metrics this package reports here, "
        "and what it found: cgroup limits, pressure stall files, CPUs, the metrics that are "
        "off and why. The OTEL_PYTHON_PROCESS_METRICS_* variables apply; OPTION=VALUE "
        "arguments override them.",
        epilog=f"Options: {named}. A value is written as in its environment variable "
        "(per_cpu=on, include='system.disk.*,system.network.io').",
    )
    p.add_argument(
        "settings",
        nargs="*",
        metavar="OPTION=VALUE",
        help="an option of the instrumentor, e.g. per_thread=on",
    )
    p.add_argument(
        "--json", action="store_true", help="print each snapshot as one JSON object on one line"
    )
    p.add_argument(
        "--every",
        type=_seconds,
        metavar="SECONDS",
        help="print a snapshot every SECONDS until Ctrl-C",
    )
    p.add_argument(
        "--options",
        action="store_true",
        help="print the options in force and where each comes from, then exit",
    )
    return p


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds, got {excerpt(text)}"
        ) from None
    if not 0.1 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"expected 0.1 to 86400 seconds, got {excerpt(text)}")
    return value


def from_arguments(p: argparse.ArgumentParser, settings: Sequence[str]) -> dict[str, Any]:
    """``OPTION=VALUE`` arguments as options; a bad one is argparse's error (exit 2)."""
    found: dict[str, Any] = {}
    for setting in settings:
        name, equals, raw = setting.partition("=")
        name = name.strip()
        if not equals or name not in ENV_VARS:
            p.error(
                f"{excerpt(setting)}: expected OPTION=VALUE, OPTION one of {', '.join(ENV_VARS)}"
            )
        parse = declared(name).form.parse
        assert parse is not None  # every option of ENV_VARS has one
        try:
            value = parse(raw)
            ProcessMetricsOptions(**{name: value})  # the check of a value from code
        except ValueError as exc:
            p.error(f"{excerpt(setting)}: {exc}")
        found[name] = value
    return found


class Resolved:
    """The options in force and where each one comes from."""

    __slots__ = ("options", "sources")

    def __init__(self, arguments: Mapping[str, Any], environ: Mapping[str, str]) -> None:
        environment = from_environment(environ)  # one warning per bad variable
        self.options = resolve({**environment, **arguments, **FORCED}, environ={})
        self.sources: dict[str, str] = {}
        for name in OPTION_NAMES:
            var = ENV_VARS.get(name)
            if name in FORCED:
                source = f"{COMMAND}: a snapshot reads the shared metrics itself"
            elif name in arguments:
                source = ARGUMENT
            elif name in environment:
                source = f"{ENVIRONMENT} ({var})"
            elif var is not None and environ.get(var, "").strip():
                source = f"{DEFAULT} ({var} was refused: see the warning)"
            else:
                source = DEFAULT
            self.sources[name] = source

    def as_data(self) -> dict[str, dict[str, Any]]:
        """``{option: {"value": ..., "source": ...}}``, in declaration order."""
        return {
            name: {"value": _plain(getattr(self.options, name)), "source": self.sources[name]}
            for name in OPTION_NAMES
        }

    def lines(self) -> list[str]:
        """One aligned line per option: name, value, source."""
        width = max(map(len, OPTION_NAMES))
        shown = {n: repr(_plain(getattr(self.options, n))) for n in OPTION_NAMES}
        value_width = min(30, max(map(len, shown.values())))
        return [
            f"{name:<{width}}  {shown[name]:<{value_width}}  {self.sources[name]}"
            for name in OPTION_NAMES
        ]


def _plain(value: Any) -> Any:
    """``value`` as JSON holds it: tuples as lists, mappings as dicts."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class Snapshot:
    """One snapshot's points, by metric, and what the instrumentation found."""

    __slots__ = ("at", "generation", "live", "points", "window")

    def __init__(self, live: Instrumentation, window: float, seen: int = 0) -> None:
        """A fresh snapshot of ``live``; ``seen`` is the generation of the one before (or 0)."""
        self.live = live
        self.window = window
        self.at = time.time()
        snap = live.cache.snapshot(seen)
        self.generation = snap.generation
        self.points: dict[Metric, list[Point]] = {
            m: [
                Point(m.name, m.unit, dict(o.attributes or {}), o.value)
                for o in live.observe(m, snap)
            ]
            for m in live.metrics
        }

    def found(self) -> dict[str, Any]:
        """What this process found: its CPUs, memory limit, cgroup, pressure files, what is off."""
        facts = self.live.cache.facts
        return {
            "pid": facts.pid,
            "platform": sys.platform,
            "python": platform.python_version(),
            "cpus": {
                "logical": facts.logical_cpus,
                "physical": facts.physical_cpus,
                "affinity": facts.affinity_cpus,
                "cgroup_quota": facts.cpu_quota,
                "available": facts.available_cpus,
            },
            "memory": {"limit": facts.memory_limit, "cgroup_limit": facts.cgroup_memory_limit},
            "cgroup": _cgroup(facts),
            "pressure": self._pressure(),
            "shared": shared(self.live.options.shared_metrics),
            "off": off(self.live),
        }

    def _pressure(self) -> dict[str, Any]:
        """Whether pressure stall files exist (``None``: not looked for) and whose they are."""
        looked = any(s.name == "pressure" for s in self.live.cache.sources)
        idle = "pressure" in self.live.cache.idle
        scopes = {
            str(p.attributes[PRESSURE_SCOPE])
            for m, points in self.points.items()
            if m.source == "pressure"
            for p in points
            if PRESSURE_SCOPE in p.attributes
        }
        return {
            "files": (not idle) if looked else None,
            "scope": scopes.pop() if len(scopes) == 1 else None,
        }

    def as_data(self, resolved: Resolved) -> dict[str, Any]:
        """The ``--json`` object (docs/getting-started.md, "See it first")."""
        return {
            "format": JSON_FORMAT,
            "version": __version__,
            "time": round(self.at, 3),
            "window": round(self.window, 3),
            "options": resolved.as_data(),
            "found": self.found(),
            "metrics": [
                {
                    "name": m.name,
                    "kind": m.kind.value,
                    "unit": m.unit,
                    "points": [
                        {"attributes": _plain(p.attributes), "value": p.value} for p in points
                    ],
                }
                for m, points in self.points.items()
            ],
        }

    def lines(self, found: bool = True) -> list[str]:
        """The readable form: the metrics, then what was found (unless ``found`` is False)."""
        facts = self.live.cache.facts
        shown = [p for points in self.points.values() for p in points]
        empty = [m.name for m, points in self.points.items() if not points]
        head = (
            f"Process metrics of this command (pid {facts.pid}), a snapshot covering "
            f"{self.window:.1f} s: process.* and cpython.* are this process; system.*, "
            "container.* and the pressure stalls are the host and its cgroup."
        )
        out = [*textwrap.wrap(head, WIDTH), "", *table(shown)]
        notes = footnotes(p.name for p in shown)
        if empty:
            notes.append(f"No value this time (unknown here, so left out): {', '.join(empty)}.")
        for note in notes:
            out += ["", *textwrap.wrap(f"Note: {note}", WIDTH)]
        return [*out, "", *found_lines(self.found())] if found else out


def _cgroup(facts: Facts) -> dict[str, Any] | None:
    """The process's cgroup folder per controller, with the hierarchy's version."""
    paths = facts.cgroup_paths
    if paths is None or not any(paths):
        return None
    return {
        controller: None if h is None else {"version": h.version, "path": str(h.own)}
        for controller, h in paths._asdict().items()
    }


def shared(mode: str) -> dict[str, Any]:
    """Who reports the shared metrics: this command (``this``), and each group's reporter.

    ``reporters`` are the live processes of this user that hold a group's role,
    as they wrote themselves in the runtime directory: a process that reports
    none of them finds there which one does, and for which group.
    """
    found = []
    for holder in reporters():
        try:
            name: str | None = psutil.Process(holder.pid).name()
        except psutil.Error:
            name = None
        found.append({**holder._asdict(), "name": name})
    return {"this": mode, "reporters": found}


EXCLUDED, OPTION, OPT_IN, NOTHING_TO_READ = "exclude", "option", "opt-in", "nothing to read"
"""The reasons a metric of this platform is off (``found.off[].reason``)."""


def off(live: Instrumentation) -> list[dict[str, Any]]:
    """The metrics of this platform that are not reported, by reason, in table order.

    Each is ``{"reason": ..., "why": ..., "metrics": [names]}``: the reason is
    left out by ``exclude``, gated by an ``option`` that is ``False``,
    ``opt-in`` and not in ``include``, or ``nothing to read`` here for its
    source; ``why`` says it in words.
    """
    options, reported = live.options, set(live.metrics)
    by_reason: dict[tuple[str, str], list[str]] = {}
    for m in METRICS:
        if m in reported or not supported(m):
            continue
        by_reason.setdefault(_why_off(m, options, live), []).append(m.name)
    return [
        {"reason": reason, "why": why, "metrics": names}
        for (reason, why), names in by_reason.items()
    ]


def _why_off(m: Metric, options: ProcessMetricsOptions, live: Instrumentation) -> tuple[str, str]:
    if any(matches(m.name, p) for p in options.exclude):
        return EXCLUDED, "left out by exclude"
    if m.option is not None and getattr(options, m.option) is False:
        return OPTION, f"{m.option}=False"
    if m.source in live.cache.idle:
        if m.source == "pressure" or options.saturation is None:
            return NOTHING_TO_READ, IDLE.get(m.source, "nothing to read for it here")
        return NOTHING_TO_READ, "nothing to read for it here"
    if m.exact_only:
        return OPT_IN, "opt-in, and only its exact name in include turns it on"
    return OPT_IN, "opt-in, and not in include (by name or glob)"


def found_lines(found: Mapping[str, Any]) -> list[str]:
    """What was found, a line each, then the metrics that are off, by reason."""
    rows = [
        ("CPUs available", _cpus_text(found["cpus"])),
        ("memory available", _memory_text(found["memory"])),
        ("cgroup", _cgroup_text(found["cgroup"])),
        ("pressure stall files", _pressure_text(found["pressure"])),
        ("shared metrics", _shared_text(found["shared"])),
    ]
    width = max(len(k) for k, _ in rows)
    out = ["Found here:"]
    for key, value in rows:
        first, *more = value.split("\n")
        out += [f"  {key:<{width}}  {first}", *(f"  {'':<{width}}  {m}" for m in more)]
    if found["off"]:
        out.append("Off, and why:")
        for o in found["off"]:
            text = f"{o['why']}: {', '.join(o['metrics'])}."
            out += textwrap.wrap(
                text, WIDTH, initial_indent="  ", subsequent_indent="      ", break_long_words=False
            )
    return out


def _cpus_text(cpus: Mapping[str, Any]) -> str:
    available, affinity, quota = cpus["available"], cpus["affinity"], cpus["cgroup_quota"]
    mask = f"affinity {affinity} of " if affinity is not None else ""
    limit = f"cgroup CPU quota {quota:g} CPUs" if quota is not None else "no cgroup CPU quota"
    shown = f"{available:g}" if available is not None else "unknown"
    return f"{shown} ({mask}{cpus['logical']} logical CPUs; {limit})"


def _memory_text(memory: Mapping[str, Any]) -> str:
    limit, cgroup_limit = memory["limit"], memory["cgroup_limit"]
    if limit is None:
        return "unknown"
    if cgroup_limit is None:
        return f"{readable(limit, 'By')} (host memory; no cgroup memory limit)"
    by = "the cgroup's limit" if cgroup_limit == limit else "host memory"
    return f"{readable(limit, 'By')} ({by}; cgroup memory limit {readable(cgroup_limit, 'By')})"


def _cgroup_text(cgroup: Mapping[str, Any] | None) -> str:
    """A line per folder: the controllers found there, then the folder."""
    if not cgroup:
        return "none found (not Linux, or no cgroup file system)"
    seen: dict[str, list[str]] = {}
    for controller, h in cgroup.items():
        if h is not None:
            seen.setdefault(h["path"], []).append(f"v{h['version']} {controller}")
    return "\n".join(f"{', '.join(names)}: {where}" for where, names in seen.items())


def _shared_text(shared: Mapping[str, Any]) -> str:
    """Who reads them here, then a line per group's reporter."""
    lines = [f"this command reads them itself (shared_metrics={shared['this']!r})"]
    if not shared["reporters"]:
        lines.append("no process of this user reports them for a group now")
    else:
        lines.append("reported for their groups (docs: Pre-fork servers) by:")
    for r in shared["reporters"]:
        name = f" ({r['name']})" if r["name"] else ""
        lines.append(f"pid {r['pid']}{name}: {r['group']}, cgroup {r['cgroup'] or '(none)'}")
    return "\n".join(lines)


def _pressure_text(pressure: Mapping[str, Any]) -> str:
    if pressure["files"] is None:
        return "not looked for (saturation=False, or not Linux)"
    if not pressure["files"]:
        return "none"
    scope = pressure["scope"]
    return "yes" + (f" ({'the cgroup' if scope == 'cgroup' else 'the host'}'s)" if scope else "")


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the command; returns its exit status (argparse exits 2 on a bad argument)."""
    p = parser()
    args, unknown = p.parse_known_args(argv)
    if unknown:  # argparse's own message would repeat them whole
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        p.error(f"unrecognized argument {excerpt(unknown[0])}{more}")
    arguments = from_arguments(p, args.settings)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    resolved = Resolved(arguments, os.environ if environ is None else environ)
    if args.options:
        _print(json.dumps(resolved.as_data()) if args.json else "\n".join(resolved.lines()))
        return 0
    live = Instrumentation(resolved.options)
    try:
        started = time.monotonic()
        time.sleep(WINDOW)
        window, seen, first = time.monotonic() - started, 0, True
        while True:
            started = time.monotonic()
            snap = Snapshot(live, window, seen)
            seen = snap.generation
            # What was found does not change between snapshots: said once, with the first.
            _print(
                json.dumps(snap.as_data(resolved)) if args.json else "\n".join(snap.lines(first))
            )
            first = False
            if args.every is None:
                return 0
            time.sleep(max(0.0, started + args.every - time.monotonic()))
            window = time.monotonic() - started
            if not args.json:
                _print("")
    except KeyboardInterrupt:  # Ctrl-C ends --every: a normal end
        return 0
    finally:
        live.cache.close()


class WriteError(Exception):
    """Standard output cannot be written (a full disk, a closed terminal): not a bug."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(exc.strerror or str(exc))


def _print(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise WriteError(exc) from exc


def run() -> int:
    """:func:`main` as the command runs it: a closed pipe or a failed write ends it cleanly."""
    try:
        return main()
    except BrokenPipeError:  # | head: the reader went away
        status = 0
    except WriteError as exc:
        print(f"{PROG}: write error: {exc}", file=sys.stderr)
        status = WRITE_ERROR
    # What is left in stdout's buffer cannot be written either: drop it, so that the
    # flush at exit finds nothing to write and prints no "Exception ignored".
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return status


if __name__ == "__main__":
    sys.exit(run())
