"""``python -m opentelemetry.instrumentation.process``, as a user runs it and in-process.

The snapshots whose contents are checked run in this process (``main(argv,
environ)``), so that mutation testing sees which tests reach the command's code;
one test holds the subprocess a user runs to the same output, and the exit
statuses, Ctrl-C, a limited cgroup and the bad arguments are run as a user runs
them. Each run gets a clean environment (no ``OTEL_*`` of the shell) and a runtime
directory of its own. What it prints is held against the package's table and
options, and what it found against the kernel's files read by the test
(``tests/support/cgroups.py``) and psutil.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from opentelemetry.instrumentation.process import __main__ as command
from opentelemetry.instrumentation.process.catalog import supported
from opentelemetry.instrumentation.process.environment import ENV_VARS
from opentelemetry.instrumentation.process.group.election import Election
from opentelemetry.instrumentation.process.group.keys import group_of
from opentelemetry.instrumentation.process.metrics import METRICS, METRICS_BY_NAME
from opentelemetry.instrumentation.process.options import OPTION_NAMES

from .conftest import events_metrics, on_by_default
from .support import cgroups
from .support.examples import ROOT, Lines, clean_env
from .support.groupkids import Kid

MODULE = "opentelemetry.instrumentation.process"
COMMAND = [sys.executable, "-m", MODULE]
ON_LINUX = sys.platform.startswith("linux")


def run(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """The command with ``args``, in a clean environment plus ``env``; not checked."""
    return subprocess.run(
        [*COMMAND, *args],
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ok(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    done = run(*args, **env)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stderr[-3000:]}"
    return done


def in_process(*args: str, **env: str) -> str:
    """What the command prints, run in this process (``main(argv, environ)``), so that a
    test of its output reaches its code as mutation testing sees it; status 0 checked."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = command.main(list(args), environ=clean_env(**env))
    assert status == 0
    return out.getvalue()


def _shared_but_under_mutmut(fixture_name: str, config: pytest.Config) -> str:
    """Module-wide, except under mutmut, which runs for a mutant only the tests that ran its
    function in its statistics pass: a shared snapshot is made in the first test alone.

    mutmut runs pytest in its own process; its statistics pass runs with
    ``MUTANT_UNDER_TEST`` taken out of the environment (tests/conftest.py).
    """
    return "function" if "MUTANT_UNDER_TEST" in os.environ or "mutmut" in sys.modules else "module"


@pytest.fixture(scope=_shared_but_under_mutmut)
def snapshot() -> dict[str, Any]:
    """One ``--json`` snapshot with the defaults."""
    (line,) = in_process("--json").splitlines()  # one object on one line
    found: dict[str, Any] = json.loads(line)
    return found


@pytest.fixture(scope=_shared_but_under_mutmut)
def text() -> str:
    """One readable snapshot with the defaults."""
    return in_process()


def test_as_a_user_runs_it_it_prints_the_same_snapshot(snapshot: dict[str, Any], text: str) -> None:
    done = ok("--json")
    assert done.stderr == "", done.stderr
    (line,) = done.stdout.splitlines()
    doc = json.loads(line)
    assert doc["found"]["pid"] != os.getpid()  # its own process
    assert set(reported(doc)) == set(reported(snapshot))
    assert doc["options"] == snapshot["options"]
    readable = ok()
    assert readable.stderr == ""
    assert table_names(readable.stdout) == table_names(text)


def table_names(text: str) -> set[str]:
    """The metric names of a readable snapshot's table."""
    table = text.partition("\n\n")[2].split("\n\n", 1)[0]
    return {line.split()[0] for line in table.splitlines()}


def reported(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {m["name"]: m["points"] for m in doc["metrics"]}


# --- the default snapshot ------------------------------------------------------


def test_the_snapshot_has_every_default_metric_with_its_values(snapshot: dict[str, Any]) -> None:
    metrics = reported(snapshot)
    with_points = {name for name, points in metrics.items() if points}
    assert with_points - events_metrics() == on_by_default()
    for m in snapshot["metrics"]:
        row = METRICS_BY_NAME[m["name"]]
        assert (m["kind"], m["unit"]) == (row.kind.value, row.unit)
    [rss] = metrics["process.memory.usage"]
    assert rss["attributes"] == {} and rss["value"] > 2**20
    modes = {p["attributes"]["cpu.mode"] for p in metrics["process.cpu.time"]}
    assert modes == {"user", "system"}
    # A utilisation over the first second, not over the microseconds since start.
    assert 0.9 <= snapshot["window"] < 30
    assert metrics["system.cpu.utilization"], "no host CPU utilisation"
    assert snapshot["format"] == command.JSON_FORMAT == 1


def test_the_snapshot_says_what_it_found_as_the_kernel_and_psutil_say(
    snapshot: dict[str, Any],
) -> None:
    found = snapshot["found"]
    assert found["pid"] == os.getpid() and found["platform"] == sys.platform  # in-process
    cpus = found["cpus"]
    assert cpus["logical"] == psutil.cpu_count(logical=True)
    assert cpus["physical"] == psutil.cpu_count(logical=False)
    if not ON_LINUX:
        return
    assert cpus["affinity"] == len(os.sched_getaffinity(0))
    assert cpus["cgroup_quota"] == cgroups.cpu_quota()
    assert cpus["available"] == cgroups.available_cpus()
    assert found["memory"]["cgroup_limit"] == cgroups.memory_limit()
    host = psutil.virtual_memory().total
    limit = cgroups.memory_limit()
    assert found["memory"]["limit"] == (min(host, limit) if limit else host)
    for controller in ("cpu", "memory"):
        place = cgroups.own_dir(controller)
        shown = found["cgroup"][controller]
        assert (shown and shown["path"]) == (place and str(place[1])), controller
    unified = cgroups.own_folder("unified")
    if unified is not None:
        assert found["cgroup"]["unified"] == {"version": 2, "path": str(unified)}
    pressure = Path("/proc/pressure/cpu").exists() or (
        unified is not None and (unified / "cpu.pressure").exists()
    )
    assert found["pressure"]["files"] is pressure
    assert (found["pressure"]["scope"] is not None) is pressure


def test_every_metric_of_this_platform_is_reported_or_said_to_be_off(
    snapshot: dict[str, Any],
) -> None:
    off = snapshot["found"]["off"]
    said = [name for o in off for name in o["metrics"]]
    assert len(said) == len(set(said)), "a metric is off for two reasons"
    here = {m.name for m in METRICS if supported(m)}
    assert set(said) | set(reported(snapshot)) == here
    assert not set(said) & set(reported(snapshot))
    reasons = {name: o["reason"] for o in off for name in o["metrics"]}
    for m in METRICS:
        if m.name not in reasons:
            continue
        if m.option is not None and m.option != "saturation":  # off by default
            assert reasons[m.name] == "option", m.name
        elif not m.default and m.option is None:
            assert reasons[m.name] == "opt-in", m.name
    # What a user reads: how to turn an opt-in metric on.
    include = {
        "opt-in, and not in include (by name or glob)",
        "opt-in, and only its exact name in include turns it on",
    }
    assert {o["why"] for o in off if o["reason"] == "opt-in"} == include
    assert {o["reason"] for o in off} <= {"exclude", "option", "opt-in", "nothing to read"}


def test_the_options_say_where_they_come_from(snapshot: dict[str, Any]) -> None:
    options = snapshot["options"]
    assert list(options) == list(OPTION_NAMES)
    for name, shown in options.items():
        if name == "shared_metrics":
            assert shown["value"] == "every"
            assert shown["source"].startswith("this command")
        else:
            assert shown["source"] == "default", name


def test_the_readable_snapshot_is_a_line_per_metric_aligned_with_what_was_found(
    text: str, snapshot: dict[str, Any]
) -> None:
    head, _, rest = text.partition("\n\n")
    assert head.startswith("Process metrics of this command (pid ")
    table = rest.split("\n\n", 1)[0].splitlines()
    names = [line.split()[0] for line in table]
    assert set(names) == {n for n, p in reported(snapshot).items() if p}
    # The values start in one column, whatever the length of the name.
    starts = {len(line) - len(line.split(None, 1)[1]) for line in table}
    assert len(starts) == 1, table
    assert re.search(r"^process\.memory\.usage +[\d.]+ MiB$", text, re.MULTILINE)
    assert "Note: process.disk.operations counts read and write calls" in text
    found = text[text.index("Found here:") :]
    cpus = snapshot["found"]["cpus"]
    assert f"CPUs available        {cpus['available']:g} (" in found
    assert f"{cpus['logical']} logical CPUs" in found
    for o in snapshot["found"]["off"]:
        assert " ".join(f"{o['why']}: {', '.join(o['metrics'])}.".split()) in " ".join(
            found.split()
        )
    assert not re.search(r"\d\.\d{5,}", text), "a value printed unrounded"


# --- options from arguments and the environment ---------------------------------


def test_arguments_beat_the_environment_and_a_bad_variable_warns_once() -> None:
    env = {
        ENV_VARS["per_thread"]: "ON",
        ENV_VARS["exclude"]: "cpython.gc.*",
        ENV_VARS["per_cpu"]: "maybe",
        ENV_VARS["max_thread_series"]: "10",
    }
    done = ok("--options", "--json", "max_thread_series=4", "include=system.disk.*", **env)
    options = json.loads(done.stdout)
    assert options["per_thread"] == {
        "value": True,
        "source": f"environment ({ENV_VARS['per_thread']})",
    }
    assert options["max_thread_series"] == {"value": 4, "source": "argument"}
    assert options["include"] == {"value": ["system.disk.*"], "source": "argument"}
    assert options["per_cpu"] == {
        "value": False,
        "source": f"default ({ENV_VARS['per_cpu']} was refused: see the warning)",
    }
    warnings = done.stderr.strip().splitlines()
    assert len(warnings) == 1 and ENV_VARS["per_cpu"] + "='maybe' is not valid" in warnings[0]
    # The same in this process, where mutation testing sees it.
    args = ("--options", "--json", "max_thread_series=4", "include=system.disk.*")
    assert json.loads(in_process(*args, **env)) == options
    # The text form says the same, one line per option, the values in one column.
    lines = in_process("--options", "per_cpu=off").splitlines()
    assert [line.split()[0] for line in lines] == list(OPTION_NAMES)
    assert re.fullmatch(r"per_cpu +False +argument", lines[OPTION_NAMES.index("per_cpu")])
    assert len({len(line) - len(line.split(None, 1)[1]) for line in lines}) == 1, lines


def test_help_says_what_it_prints_and_which_variables_apply() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        command.main(["--help"], environ=clean_env())
    assert done.value.code == 0
    said = " ".join(out.getvalue().split())
    assert "Print one snapshot of the process metrics this package reports here" in said
    assert "The OTEL_PYTHON_PROCESS_METRICS_* variables apply" in said
    assert all(f"--{flag}" in said for flag in ("json", "every", "options"))
    assert f"Options: {', '.join(ENV_VARS)}. A value is written as in its" in said
    assert "[OPTION=VALUE ...]" in said and "--every SECONDS" in said
    for option in command.parser()._actions:  # every argument says what it does
        if option.dest != "help":
            assert option.help and " ".join(option.help.split()) in said, option.dest


def test_the_snapshot_follows_the_options() -> None:
    out = in_process(
        "--json",
        "exclude=cpython.gc.*",
        "include=system.disk.io",
        **{ENV_VARS["per_thread"]: "yes"},
    )
    doc = json.loads(out)
    names = set(reported(doc))
    assert "process_metrics.thread.cpu.time" in names
    assert not {n for n in names if n.startswith("cpython.gc.")}
    if supported(METRICS_BY_NAME["system.disk.io"]):
        assert "system.disk.io" in names
    off = {name: o["reason"] for o in doc["found"]["off"] for name in o["metrics"]}
    assert off["cpython.gc.collections"] == "exclude"
    assert "system.disk.operations" in off  # include named one metric only


@pytest.mark.parametrize(
    "args",
    [
        ["per_cpu=maybe"],
        ["nope=1"],
        ["per_cpu"],
        ["attributes=x"],  # code only
        ["max_thread_series=3"],
        ["include=process.cpu.tme"],
        ["--every", "0"],
        ["--every", "soon"],
        ["--bogus"],
    ],
    ids=" ".join,
)
def test_a_bad_argument_is_argparses_error_and_status_2(args: list[str]) -> None:
    done = run(*args)
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert done.stderr.startswith("usage: python -m opentelemetry.instrumentation.process")
    [error] = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert error.split(": error: ")[1], done.stderr
    assert "Traceback" not in done.stderr


HUGE = "x" * 100_000
"""A 100 KB value: README, "every error message ... at most a 200-character excerpt"."""


@pytest.mark.parametrize(
    "args",
    [
        [f"per_cpu={HUGE}"],  # a bad value
        [f"{HUGE}=1"],  # a bad name
        [HUGE],  # no "="
        ["--every", "1" * 100_000],  # a bad number of seconds
        [f"--{HUGE}"],  # an unknown flag: argparse's own message
        [f"--{HUGE}", f"--{HUGE}"],  # two of them
    ],
    ids=["value", "name", "no-equals", "every", "flag", "two-flags"],
)
def test_a_huge_bad_argument_gets_a_bounded_error(args: list[str]) -> None:
    done = run(*args)
    assert done.returncode == 2, done.stderr[-500:]
    [error] = [line for line in done.stderr.splitlines() if ": error: " in line]
    # The fixed words of the message (the list of options, at most), and one excerpt.
    assert len(error) <= 800, f"{len(error)} characters: {error[:300]}..."
    assert len(done.stderr) <= 2000, f"{len(done.stderr)} characters of stderr"
    shown = max(len(run) for run in re.findall(r"x+|1+", error))
    assert 150 <= shown <= 200, error  # the excerpt shows the value, at most 200 characters
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="Linux only")
@pytest.mark.parametrize("args", [[], ["--json"], ["--options"]], ids=["text", "json", "options"])
def test_a_write_error_is_one_line_and_status_74_as_a_full_disk_gives(args: list[str]) -> None:
    """``> /dev/full``: as ``cat`` does, one line on stderr and a failure status, no traceback."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [*COMMAND, *args],
            env=clean_env(),
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == command.WRITE_ERROR == 74, done.stderr[-3000:]  # EX_IOERR
    assert done.stderr == f"{command.PROG}: write error: No space left on device\n"
    page = " ".join((ROOT / "docs" / "getting-started.md").read_text().split())
    assert f"`write error: ...`, and exits with status {command.WRITE_ERROR}." in page


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="Linux only")
def test_a_failed_write_says_what_the_os_said() -> None:
    """The same fault in this process, as mutation testing sees the command's code run."""
    # Unbuffered: the write fails at once, and closing has nothing left to flush.
    with open("/dev/full", "wb", buffering=0) as raw:
        full = io.TextIOWrapper(raw, write_through=True)
        with contextlib.redirect_stdout(full), pytest.raises(command.WriteError) as caught:
            command.main(["--options"], environ=clean_env())
        full.detach()
    assert str(caught.value) == "No space left on device"
    assert isinstance(caught.value.__cause__, OSError)


def _snapshots(stdout: str) -> list[str]:
    """The readable snapshots of ``--every``, each from its head line on."""
    parts = re.split(r"(?m)^(?=Process metrics of this command )", stdout)
    return [p for p in parts if p.strip()]


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT, which Windows cannot send")
def test_every_prints_what_was_found_once_with_the_first_snapshot() -> None:
    proc = subprocess.Popen(
        [*COMMAND, "--every", "0.3"],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        lines = Lines(proc.stdout)
        deadline = time.monotonic() + 60
        heads = 0
        while heads < 4:  # the fourth head: the third snapshot is whole
            line = lines.next(deadline)
            assert line is not None, "".join(lines.seen)
            heads += line.startswith("Process metrics of this command ")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    first, *later = _snapshots("".join(lines.seen))[:3]
    assert len(later) == 2
    assert "\nFound here:\n" in first and "\nOff, and why:\n" in first
    for snap in later:
        assert "Found here:" not in snap and "Off, and why:" not in snap, snap
        assert "\nprocess.cpu.time " in snap  # the metrics themselves, each time


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT, which Windows cannot send")
def test_every_repeats_until_ctrl_c_which_ends_it_with_status_0() -> None:
    proc = subprocess.Popen(
        [*COMMAND, "--every", "0.3", "--json"],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A run started in the background by a shell without job control ignores
        # SIGINT, and so would the command: a terminal's Ctrl-C is what is tested.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    docs: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None
        lines = Lines(proc.stdout)
        deadline = time.monotonic() + 60
        while len(docs) < 3:
            line = lines.next(deadline)
            assert line is not None, lines.seen
            docs.append(json.loads(line))
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert code == 0
    assert proc.stderr is not None and proc.stderr.read() == ""
    assert [d["found"]["pid"] for d in docs] == [proc.pid] * 3
    times = [d["time"] for d in docs]
    assert times == sorted(times) and len(set(times)) == 3
    # Each later snapshot's utilisations cover the time since the one before.
    assert all(d["window"] >= 0.29 for d in docs[1:])
    uptimes = [reported(d)["process.uptime"][0]["value"] for d in docs]
    assert uptimes == sorted(uptimes) and len(set(uptimes)) == 3


def _json_of(argv: list[str]) -> Any:
    """The JSON document that ``argv`` prints, in a clean environment; it must exit 0."""
    done = subprocess.run(
        argv, env=clean_env(), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_it_needs_neither_the_sdk_nor_an_exporter() -> None:
    """The runtime dependencies only: the SDK cannot be imported in this run."""
    script = (
        "import runpy, sys\n"
        "sys.modules['opentelemetry.sdk'] = None  # import fails\n"
        f"sys.argv = ['{MODULE}', '--json']\n"
        f"runpy.run_module('{MODULE}', run_name='__main__', alter_sys=True)\n"
    )
    doc = _json_of([sys.executable, "-c", script])
    assert "process.cpu.time" in reported(doc)


# --- in a cgroup with limits -----------------------------------------------------


@pytest.fixture
def limited() -> Iterator[tuple[cgroups.Cgroup, cgroups.Cgroup]]:
    """A v1 cpu cgroup with a quota of 0.5 CPU and a memory cgroup limited to 512 MiB."""
    with cgroups.child_cgroup("cpu") as cpu, cgroups.child_cgroup("memory") as memory:
        cpu.write("cpu.cfs_period_us", "100000")
        cpu.write("cpu.cfs_quota_us", "50000")
        memory.write("memory.limit_in_bytes", str(512 * 2**20))
        yield cpu, memory


def test_in_a_limited_cgroup_it_shows_the_quota_the_limit_and_the_container_metrics(
    limited: tuple[cgroups.Cgroup, cgroups.Cgroup],
) -> None:
    cpu, memory = limited
    # The shell moves itself into both cgroups, then becomes the command.
    enter = f"echo $$ > {cpu.folder}/cgroup.procs && echo $$ > {memory.folder}/cgroup.procs"
    doc = _json_of(["sh", "-c", f'{enter} && exec "$@"', "sh", *COMMAND, "--json"])
    found = doc["found"]
    assert found["cpus"]["cgroup_quota"] == 0.5
    assert found["cpus"]["available"] == min(0.5, len(os.sched_getaffinity(0)))
    assert found["memory"]["cgroup_limit"] == 512 * 2**20
    assert found["memory"]["limit"] == min(512 * 2**20, psutil.virtual_memory().total)
    assert found["cgroup"]["cpu"] == {"version": 1, "path": str(cpu.folder)}
    assert found["cgroup"]["memory"] == {"version": 1, "path": str(memory.folder)}
    metrics = reported(doc)
    [limit] = metrics["process_metrics.cgroup.memory.limit"]
    assert limit["value"] == 512 * 2**20
    assert metrics["process_metrics.cgroup.cpu.periods"], "the quota's periods are missing"
    assert metrics["container.memory.usage"][0]["value"] > 2**20
    assert not [o for o in found["off"] if o["reason"] == "nothing to read"]
    # The readable form of the same findings.
    lines = "\n".join(command.found_lines(found))
    assert "CPUs available        0.5 (" in lines
    assert "cgroup CPU quota 0.5 CPUs)" in lines
    assert "512.0 MiB (the cgroup's limit; cgroup memory limit 512.0 MiB)" in lines
    assert f"v1 memory: {memory.folder}" in lines


# --- the docs that promise it --------------------------------------------------------


def _paths(value: Any, path: str = "") -> Iterator[tuple[str, bool]]:
    """(dotted path, is null) of each leaf; ``<option>``, ``<controller>`` stand for keys."""
    whole = path.endswith((".attributes", ".value"))  # a value as it is, whatever its type
    if isinstance(value, dict) and not whole:
        wildcard = {"options": "<option>", "found.cgroup": "<controller>"}.get(path)
        for key, inner in value.items():
            yield from _paths(inner, f"{path}.{wildcard or key}" if path else key)
    elif isinstance(value, list) and not whole:
        if not value:  # none here (found.shared.reporters): its items' keys cannot be seen
            yield f"{path}[]", True
        for inner in value:
            yield from _paths(inner, f"{path}[]")
    else:
        yield path, value is None


def test_the_json_shape_is_the_one_documented(snapshot: dict[str, Any]) -> None:
    page = (ROOT / "docs" / "getting-started.md").read_text()
    section = page[page.index("## See it first") : page.index("## In code")]
    documented = set(re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE))
    produced = dict(_paths(snapshot))
    for path, null in produced.items():
        assert path in documented or (null and any(d.startswith(path + ".") for d in documented)), (
            f"{path} is not documented"
        )
    for path in documented:
        assert path in produced or any(
            null and path.startswith(p + ".") for p, null in produced.items()
        ), f"{path} is documented but not produced"
    assert f"taken {command.WINDOW:g} s after the start" in " ".join(section.split())


def test_the_readme_quick_start_begins_with_the_command() -> None:
    readme = (ROOT / "README.md").read_text()
    quick = readme[readme.index("## Quick start") :]
    first = re.search(r"```(\w+)\n(.*?)```", quick, re.DOTALL)
    assert first is not None
    assert first.group(2).split("\n")[0].split("#")[0].strip() == f"python -m {MODULE}"


def test_what_was_found_reads_plainly_where_little_was_found() -> None:
    assert command._cgroup_text(None) == "none found (not Linux, or no cgroup file system)"
    assert (
        command._cgroup_text(
            {
                "cpu": {"version": 2, "path": "/a"},
                "memory": {"version": 2, "path": "/a"},
                "io": None,
            }
        )
        == "v2 cpu, v2 memory: /a"
    )
    assert command._pressure_text({"files": None, "scope": None}) == (
        "not looked for (saturation=False, or not Linux)"
    )
    assert command._pressure_text({"files": [], "scope": None}) == "none"
    assert command._pressure_text({"files": ["cpu"], "scope": None}) == "yes"
    assert command._pressure_text({"files": ["cpu"], "scope": "cgroup"}) == "yes (the cgroup's)"
    assert command._pressure_text({"files": ["cpu"], "scope": "host"}) == "yes (the host's)"


@pytest.mark.skipif(not os.path.exists("/proc/self/comm"), reason="Linux only")
def test_a_reporter_is_named_as_its_own_process(rundir: Path, kids: list[Kid]) -> None:
    """The command names each group's reporter by that process's name, not its own."""
    held: list[Election] = []

    def lead() -> bool:
        Path("/proc/self/comm").write_text("reporter-kid")  # the name psutil reads
        held.append(Election(group_of("service.name=named-reporter")))
        return held[0].leader()

    kid = Kid(lead)
    kids.append(kid)
    assert kid.result is True
    [found] = [r for r in command.shared("group")["reporters"] if r["pid"] == kid.pid]
    assert found["name"] == "reporter-kid" != psutil.Process().name()
    assert found["group"] == "service.name=named-reporter"


def test_what_was_found_reads_plainly_where_there_are_no_limits_or_reporters() -> None:
    cpus = {"available": 2.0, "affinity": None, "cgroup_quota": None, "logical": 2}
    assert command._cpus_text(cpus) == "2 (2 logical CPUs; no cgroup CPU quota)"
    gib = 2**30
    # A cgroup limit above the host's memory: the host's is the one that binds.
    memory = command._memory_text({"limit": gib, "cgroup_limit": 4 * gib})
    assert memory == "1.0 GiB (host memory; cgroup memory limit 4.0 GiB)"
    assert command._memory_text({"limit": gib, "cgroup_limit": None}) == (
        "1.0 GiB (host memory; no cgroup memory limit)"
    )
    assert command._memory_text({"limit": None, "cgroup_limit": None}) == "unknown"
    alone = {"this": "every", "reporters": []}
    assert command._shared_text(alone).splitlines() == [
        "this command reads them itself (shared_metrics='every')",
        "no process of this user reports them for a group now",
    ]
    reporters = [
        {"pid": 7, "name": "gunicorn", "group": "a", "cgroup": "/w"},
        {"pid": 8, "name": "", "group": "b", "cgroup": None},
    ]
    assert command._shared_text({"this": "group", "reporters": reporters}).splitlines()[1:] == [
        "reported for their groups (docs: Pre-fork servers) by:",
        "pid 7 (gunicorn): a, cgroup /w",
        "pid 8: b, cgroup (none)",
    ]
    assert (ROOT / "docs" / "prefork.md").read_text().startswith("# Pre-fork servers\n")
