"""Other projects' test suites, run without the package and with it: a test that fails
only with the package, or anything the package logs, fails the run.

    python scripts/compat.py                       every suite on every Python found
    python scripts/compat.py --python 3.11 --suite test_signal --suite flask
    python scripts/compat.py --quick               the cell that `make test` runs
    python scripts/compat.py --list                the Pythons and suites it would run

Each suite runs twice, with ``scripts/compat/sitecustomize.py`` on ``PYTHONPATH``
(so in every child Python that inherits the environment, as under
``opentelemetry-instrument``): once with the SDK alone (a ``MeterProvider`` whose
reader collects every 200 ms), once with the package too, every option on. The
suites: CPython's own regression tests (``python -m test``) for each Python, and
the pytest suites of a few frameworks from their source distributions on PyPI.

The verdict, suite by suite: a test that fails (or errors, crashes, times out or
changes regrtest's environment) with the package and not without it fails the
run, and so does any record at WARNING or above that the SDK or the package logs
with the package and not without it. Tests that fail either way are reported.
A test that fails only with the package is run again in both modes; one that then
passes with the package is reported as flaky, not failed.

Downloads, venvs and each run's output go under ``.cache/compat``; the
interpreters from ``make pythons`` are found in ``$PYTHONS_CACHE_DIR``
(default ``.cache/pythons``). Exit status: 0 when no suite has a test that fails
only with the package, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
HOOK_DIR = ROOT / "scripts" / "compat"
CACHE = ROOT / ".cache" / "compat"
PYTHONS_CACHE = Path(os.environ.get("PYTHONS_CACHE_DIR") or ROOT / ".cache" / "pythons")

CPYTHON_SUITES = (
    "test_asyncio",
    "test_threading",
    "test_signal",
    "test_gc",
    "test_os",
    "test_subprocess",
    "test_selectors",
    "test_fork1",
    "test_wait4",
    "test_faulthandler",
    "test_sched",
    "test_concurrent_futures",
    "test_interpreters",
    "test_atexit",
)
"""What an in-process probe touches: loops, threads, signals, gc, fork, subinterpreters."""
QUICK_SUITES = ("test_signal", "test_threading", "test_asyncio")
"""The cell of ``make test``: the three that found faults (issue 35), on the running Python."""
RESOURCES = "all,-network,-urlfetch,-gui,-audio,-largefile,-cpu,-decimal"
"""regrtest's ``-u``: every resource but the network, slow and machine-specific ones."""


class Framework(NamedTuple):
    """A framework whose pytest suite runs from its source distribution."""

    name: str
    requirement: str
    extras: str
    """What ``pip install -e DIR[extras]`` adds (``""``: none)."""
    group: str
    """The dependency group of its pyproject.toml that its tests need."""
    pins: tuple[str, ...] = ()
    """Requirements that hold its test tools at versions its tests work with."""


FRAMEWORKS = (
    # flask 3.1.3's tests import a name that pytest 9 removed (_pytest.monkeypatch.notset)
    Framework("flask", "flask==3.1.3", "async,dotenv", "tests", ("pytest<9",)),
    Framework("starlette", "starlette==1.10.0", "full", "dev"),
    Framework("anyio", "anyio==4.16.0", "trio", "test"),
)
FRAMEWORK_NAMES = tuple(f.name for f in FRAMEWORKS)


TOLERATED_RECORDS = {
    "Metric collection timed out": "the SDK gives its last collection, at exit, one export"
    " interval, which this harness sets short; on a loaded machine a process that exits while"
    " busy can take longer (reported, not counted)",
    "Cannot call collect on a MetricReader until it is registered": "the SDK starts the"
    " reader's thread before the MeterProvider registers the reader; with the short interval"
    " of this harness, on a loaded machine, its first tick can come first, in either mode",
    "child processes, more than max_children=": "children=True, which every"
    " option on turns on, in a test process that starts more children than the cap: the"
    " package says once which it left out, as documented (docs/supervisor.md)",
}
"""Records that the package's presence brings about but that are this harness's doing:
a part of their message, and why."""


def tolerated(record: Record) -> str:
    """Why ``record`` is reported and not counted, or ``""``."""
    return next((why for s, why in TOLERATED_RECORDS.items() if s in record.message), "")


class Python(NamedTuple):
    tag: str
    """``3.11``, ``3.13t``."""
    path: str


class Record(NamedTuple):
    """A line that the hook wrote: a log record at WARNING or above, or its own error."""

    pid: int
    kind: str
    logger: str
    level: str
    message: str
    detail: str

    @property
    def key(self) -> str:
        """The record without what changes between runs (numbers, addresses)."""
        return f"{self.logger} {self.level} " + re.sub(r"0x[0-9a-f]+|\d+", "N", self.message)


class Run(NamedTuple):
    """One suite run in one mode."""

    mode: str
    tests: int
    """Test cases that ran (from the JUnit XML)."""
    failed: dict[str, str]
    """Test id (or ``module [crashed]``-like) to a line saying why."""
    records: tuple[Record, ...]
    processes: int
    """Python processes that loaded the hook."""
    seconds: float
    exit_code: int
    folder: Path


class Verdict(NamedTuple):
    python: str
    suite: str
    sdk: Run
    package: Run
    only_package: tuple[str, ...]
    flaky: tuple[str, ...]
    """Failed only with the package, then passed with it when run again."""
    either: tuple[str, ...]
    only_sdk: tuple[str, ...]
    new_records: tuple[Record, ...]

    @property
    def ok(self) -> bool:
        return not self.only_package and not self.new_records


class Unavailable(Exception):
    """A Python or suite that cannot be run here, and why."""


# --- the Pythons and their venvs ---------------------------------------------------


def find_pythons() -> list[Python]:
    """pyenv's newest 3.10-3.13 and the interpreters of ``make pythons``."""
    found = []
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    for minor in ("3.10", "3.11", "3.12", "3.13"):
        versions = sorted(
            (p for p in pyenv.glob(f"{minor}.*") if re.fullmatch(r"\d+\.\d+\.\d+", p.name)),
            key=lambda p: tuple(int(x) for x in p.name.split(".")),
        )
        if versions:
            found.append(Python(minor, str(versions[-1] / "bin" / "python3")))
    for path in sorted(glob.glob(str(PYTHONS_CACHE / "bin" / "python3.*"))):
        found.append(Python(Path(path).name.removeprefix("python"), path))
    return found


def run_quiet(cmd: Sequence[str], log: Path, **kwargs: object) -> None:
    """Run ``cmd`` with its output to ``log``; raise Unavailable naming the log if it fails."""
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode:
        raise Unavailable(f"`{' '.join(cmd)[:200]}` failed (exit {done.returncode}), see {log}")


def venv(name: str, python: str, installs: Sequence[Sequence[str]], cwd: Path = ROOT) -> str:
    """A venv in .cache/compat/venvs/NAME with each ``pip install`` argument list done.

    Kept while the package's pyproject.toml and the install arguments are unchanged.
    """
    folder = CACHE / "venvs" / name
    stamp = folder / ".compat-installed"
    want = hashlib.sha256(
        (ROOT / "pyproject.toml").read_bytes() + json.dumps([python, installs]).encode()
    ).hexdigest()
    bin_python = str(folder / "bin" / "python")
    if stamp.exists() and stamp.read_text() == want and os.path.exists(bin_python):
        return bin_python
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    log = CACHE / "venvs" / f"{name}.log"
    log.write_text("")
    run_quiet([python, "-m", "venv", str(folder)], log)
    pip = [bin_python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    run_quiet([*pip, "--upgrade", "pip"], log)
    for args in installs:
        run_quiet([*pip, *args], log, cwd=cwd)
    stamp.write_text(want)
    return bin_python


def package_venv(py: Python) -> str:
    """The Python of a venv with the package (editable, from this tree) and the SDK."""
    return venv(f"python{py.tag}", py.path, [["-e", str(ROOT), "opentelemetry-sdk>=1.28,<2"]])


# --- where CPython's tests are ---------------------------------------------------


def probe(python: str, code: str, path: Path | None = None) -> str | None:
    """What ``python -c code`` prints (``path`` first on sys.path), or None if it fails."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    done = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, check=False, env=env
    )
    return done.stdout.strip() if done.returncode == 0 else None


def cpython_tests(py: Python) -> Path | None:
    """A folder holding a complete ``test`` package for ``py``, or None if its own is.

    Debian splits the tests off the standard library (``libpython3.X-testsuite``,
    fetched with ``make pythons``' private apt); the free-threaded build has none
    (its source tarball's ``Lib/test`` is taken). Raises Unavailable otherwise.
    """
    if probe(py.path, "import test.test_asyncio, test.libregrtest") is not None:
        return None
    version = probe(py.path, "import platform; print(platform.python_version())")
    stdlib_test = probe(py.path, "import os, test; print(os.path.dirname(test.__file__))")
    if version is None:
        raise Unavailable(f"{py.path} does not run")
    folder = CACHE / "tests" / py.tag
    if (folder / "test" / "test_asyncio").is_dir():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "src").mkdir(parents=True)
    if stdlib_test is not None:  # Debian: the rest of the package is in the stdlib
        debian_testsuite(py, version, folder / "src")
        minor = ".".join(version.split(".")[:2])
        shutil.copytree(stdlib_test, folder / "test")
        shutil.copytree(
            folder / "src" / "usr" / "lib" / f"python{minor}" / "test",
            folder / "test",
            dirs_exist_ok=True,
        )
    else:
        source_tests(version, folder / "src")
        shutil.move(str(folder / "src" / "Lib" / "test"), folder / "test")
    shutil.rmtree(folder / "src")
    return folder


def debian_testsuite(py: Python, version: str, into: Path) -> None:
    """Unpack Debian's ``libpython3.X-testsuite`` of the installed revision into ``into``."""
    minor = ".".join(version.split(".")[:2])
    conf = PYTHONS_CACHE / "apt" / "sid" / "apt.conf"
    stamp = PYTHONS_CACHE / "sid.stamp"
    found = (
        re.search(rf"^python{re.escape(minor)}=(\S+)$", stamp.read_text(), re.M)
        if (stamp.exists())
        else None
    )
    if not conf.exists() or found is None or not found.group(1).startswith(version):
        raise Unavailable(f"{py.tag}: no private apt of `make pythons` ({conf}) naming {version}")
    package = f"libpython{minor}-testsuite={found.group(1)}"
    debs = CACHE / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    log = CACHE / "debs" / "apt.log"
    try:
        run_quiet(["apt-get", "-c", str(conf), "-qq", "download", package], log, cwd=debs)
    except Unavailable:  # lists older than the revision: fetch them once
        run_quiet(["apt-get", "-c", str(conf), "-qq", "update"], log)
        run_quiet(["apt-get", "-c", str(conf), "-qq", "download", package], log, cwd=debs)
    deb = next(debs.glob(f"libpython{minor}-testsuite_*.deb"))
    run_quiet(["dpkg-deb", "-x", str(deb), str(into)], log)
    deb.unlink()


def source_tests(version: str, into: Path) -> None:
    """Extract ``Lib/test`` of CPython ``version`` from Debian's copy of its tarball."""
    minor = ".".join(version.split(".")[:2])
    mirror = subprocess.run(
        ["bash", "-c", f"source {ROOT}/scripts/lib/debian-mirror.sh && detect_mirror"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    url = f"{mirror}/pool/main/p/python{minor}/python{minor}_{version}.orig.tar.xz"
    tarball = CACHE / "debs" / Path(url).name
    tarball.parent.mkdir(parents=True, exist_ok=True)
    if not tarball.exists():
        run_quiet(
            ["curl", "-fsSL", "--retry", "3", "-o", str(tarball), url], CACHE / "debs" / "curl.log"
        )
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if "/Lib/test/" in m.name]
        for m in members:
            m.name = m.name.split("/", 1)[1]
        tar.extractall(into, members=members)  # Debian's copy of CPython's tarball


def cpython_suites(python: str, tests_dir: Path | None, testdir: Path | None) -> set[str]:
    """The test files and packages that ``python -m test`` finds (with ``--testdir``, there)."""
    if testdir is None:
        found = probe(python, "import os, test; print(os.path.dirname(test.__file__))", tests_dir)
        testdir = Path(found or "")
    return {p.name.removesuffix(".py") for p in testdir.glob("test_*")}


# --- running a suite --------------------------------------------------------------


def environment(
    mode: str, logs: Path, args: argparse.Namespace, paths: Iterable[Path]
) -> dict[str, str]:
    """The environment of a suite: the hook on PYTHONPATH, told what to load; no OTEL_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.pop("PYTHONHOME", None)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (HOOK_DIR, *paths))
    env["PROCESS_COMPAT_MODE"] = mode
    env["PROCESS_COMPAT_LOG_DIR"] = str(logs)
    env["PROCESS_COMPAT_INTERVAL_MS"] = str(args.interval_ms)
    env["PROCESS_COMPAT_OPTIONS"] = ",".join(args.option)
    env["PROCESS_COMPAT_CHOICES"] = "other" if args.other_choices else "default"
    return env


def execute(
    cmd: Sequence[str], env: dict[str, str], cwd: Path, out: Path, timeout: float
) -> tuple[int, float]:
    """Run ``cmd`` in a session of its own, output to ``out``; (exit code, seconds).

    Past ``timeout`` the whole session is killed and the exit code is ``-SIGKILL``.
    """
    started = time.monotonic()
    with out.open("w") as stream:
        stream.write(f"$ {' '.join(cmd)}\n")
        stream.flush()
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=cwd,
            stdout=stream,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            stream.write(f"\n[compat] killed after {timeout:.0f} s\n")
            code = -signal.SIGKILL
        finally:  # this harness stopped (Ctrl-C, SIGTERM): so do the suite and its workers
            if proc.poll() is None:
                kill_tree(proc.pid)
    return code, time.monotonic() - started


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every descendant (regrtest's workers have sessions of their own)."""
    import psutil  # a dependency of the package, so in every venv this runs from

    try:
        family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(family, timeout=30)


def read_records(logs: Path) -> tuple[tuple[Record, ...], int]:
    """The hook's records (WARNING and above, its own errors) and how many processes started."""
    records, started = [], 0
    for path in sorted(logs.glob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                fields = json.loads(line)
            except ValueError:
                continue
            if fields["kind"] == "start":
                started += 1
            else:
                records.append(
                    Record(
                        fields["pid"],
                        fields["kind"],
                        fields["logger"],
                        fields["level"],
                        fields["message"],
                        fields["detail"],
                    )
                )
    return tuple(records), started


def junit_cases(path: Path) -> tuple[int, dict[str, str]]:
    """(test cases, failed or errored ones with their message) of a JUnit XML file."""
    if not path.exists():
        return 0, {}
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return 0, {}
    cases, failed = 0, {}
    for case in root.iter("testcase"):
        name = case.get("name")
        if name is None:  # regrtest leaves one unnamed when a subtest failed
            continue
        cases += 1
        classname = case.get("classname")
        test_id = f"{classname}.{name}" if classname else name
        for child in case:
            if child.tag in ("failure", "error"):
                failed[test_id] = f"{child.tag}: {last_line(child.get('message') or child.text)}"
    return cases, failed


def last_line(text: str | None) -> str:
    """The last non-blank line of ``text`` (an exception's message), at most 200 characters."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1].strip()[:200] if lines else ""


PROGRESS = re.compile(r"\[\s*\d+/\d+(?:/\d+)?\] (test[\w.]*) (.*)$")
UNITTEST_FAILURE = re.compile(r"^(FAIL|ERROR): (\S+) \(([^)]*)\)")


def regrtest_failures(output: str, failed: dict[str, str]) -> None:
    """Add to ``failed`` the tests that regrtest's output names, and its files that did not finish.

    A test file that crashed, timed out, changed the environment, or failed with no
    test named, counts as one failure, ``test_x [crashed]``: its worker took the
    results of its tests with it.
    """
    files_failed: dict[str, str] = {}
    for line in output.splitlines():
        progress = PROGRESS.search(line)
        if progress:
            name, status = progress.group(1), progress.group(2).split(" -- ")[0].strip()
            if kind := file_status(status):
                files_failed[name] = f"{kind}: {status[:200]}"
        elif unit := UNITTEST_FAILURE.match(line):
            test, where = unit.group(2), unit.group(3)
            failed.setdefault(where if where.endswith("." + test) else f"{where}.{test}", unit[1])
    for name, why in files_failed.items():
        kind = why.split(":")[0]
        named = any(t.startswith(f"{name}.") or f".{name}." in f".{t}" for t in failed)
        if kind != "failed" or not named:
            failed[f"{name} [{kind}]"] = why


def file_status(status: str) -> str:
    """``crashed``, ``timed out``, ``env changed``, ``failed``, or ``""`` (passed or skipped)."""
    lowered = status.lower()
    for words, kind in (
        (("crash", "exit code", "non-zero", "interrupted"), "crashed"),
        (("timed out", "timeout"), "timed out"),
        (("env changed",), "env changed"),
        (("failed", "error"), "failed"),
    ):
        if any(w in lowered for w in words):
            return kind
    return ""


def regrtest(
    py: str,
    tests_dir: Path | None,
    suite: str,
    mode: str,
    folder: Path,
    args: argparse.Namespace,
    match: Sequence[str] = (),
) -> Run:
    """One run of ``python -m test SUITE`` in ``mode``."""
    logs, junit = _fresh(folder)
    cmd = [
        py,
        "-m",
        "test",
        f"-j{args.jobs}",
        "--junit-xml",
        str(junit),
        f"--timeout={args.timeout}",
        "-u",
        RESOURCES,
    ]
    if args.testdir:
        cmd += ["--testdir", str(args.testdir)]
    cmd += [suite, *(f"-m{m}" for m in match)]
    paths = [tests_dir] if tests_dir else []
    env = environment(mode, logs, args, paths)
    code, seconds = execute(cmd, env, folder, folder / "output.txt", args.timeout * 3 + 600)
    output = (folder / "output.txt").read_text(errors="replace")
    tests, failed = junit_cases(junit)
    regrtest_failures(output, failed)
    if code not in (0, 2, 3, 4, 5) and not failed:
        failed[f"{suite} [exit {code}]"] = (
            f"crashed: regrtest exited with {code}: {last_line(output)}"
        )
    records, processes = read_records(logs)
    return Run(mode, tests, failed, records, processes, seconds, code, folder)


def _fresh(folder: Path) -> tuple[Path, Path]:
    """``folder`` emptied for a run: its log folder, made, and its JUnit file's path."""
    shutil.rmtree(folder, ignore_errors=True)
    logs = folder / "logs"
    logs.mkdir(parents=True)
    return logs, folder / "junit.xml"


def pytest_suite(
    py: str, where: Path, framework: Framework, mode: str, folder: Path, args: argparse.Namespace
) -> Run:
    """One run of a framework's pytest suite in ``mode``."""
    logs, junit = _fresh(folder)
    cmd = [
        py,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junit-xml={junit}",
        "tests",
    ]
    env = environment(mode, logs, args, [])
    code, seconds = execute(cmd, env, where, folder / "output.txt", args.timeout * 3)
    tests, failed = junit_cases(junit)
    if code not in (0, 1, 5) and not failed:
        failed[f"{framework.name} [exit {code}]"] = f"crashed: pytest exited with {code}"
    records, processes = read_records(logs)
    return Run(mode, tests, failed, records, processes, seconds, code, folder)


def framework_source(framework: Framework) -> Path:
    """The unpacked source distribution of ``framework`` (pip download, sdist only)."""
    sdists = CACHE / "sdist"
    sdists.mkdir(parents=True, exist_ok=True)
    name, version = framework.requirement.split("==")
    folder = sdists / f"{name}-{version}"
    if (folder / "tests").is_dir():
        return folder
    run_quiet(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-binary",
            ":all:",
            "--no-deps",
            "--dest",
            str(sdists),
            framework.requirement,
        ],
        sdists / "pip.log",
    )
    with tarfile.open(sdists / f"{name}-{version}.tar.gz") as tar:
        tar.extractall(sdists)  # a source distribution from PyPI
    return folder


def framework_venv(framework: Framework, base: str, tag: str) -> str:
    source = framework_source(framework)
    extras = f"[{framework.extras}]" if framework.extras else ""
    return venv(
        f"{framework.name}-{tag}",
        base,
        [
            [
                "-e",
                f"{source}{extras}",
                "--group",
                f"{source / 'pyproject.toml'}:{framework.group}",
                *framework.pins,
            ],
            ["-e", str(ROOT), "opentelemetry-sdk>=1.28,<2"],
        ],
    )


# --- comparing ---------------------------------------------------------------------


def compare(
    python: str, suite: str, sdk: Run, package: Run, again: tuple[Run, Run] | None = None
) -> Verdict:
    """What failed only with the package (confirmed by ``again``: a run of each mode more)."""
    only = sorted(set(package.failed) - set(sdk.failed))
    flaky: list[str] = []
    if again is not None:
        sdk2, package2 = again
        flaky = [t for t in only if t not in package2.failed or t in sdk2.failed]
        only = [t for t in only if t not in flaky]
    seen = {r.key for r in sdk.records}
    new = tuple(r for r in package.records if r.key not in seen and not tolerated(r))
    return Verdict(
        python,
        suite,
        sdk,
        package,
        tuple(only),
        tuple(flaky),
        tuple(sorted(set(package.failed) & set(sdk.failed))),
        tuple(sorted(set(sdk.failed) - set(package.failed))),
        new,
    )


def rerun_names(failed: Iterable[str]) -> list[str]:
    """regrtest ``-m`` patterns for these failed tests: their method names."""
    return sorted({t.rsplit(".", 1)[-1] for t in failed})


def describe(v: Verdict) -> str:
    """The progress line of a suite."""

    def side(r: Run) -> str:
        return f"{r.tests} tests, {len(r.failed)} failed, {r.seconds:.0f} s"

    verdict = "ok" if v.ok else "FAIL"
    return (
        f"[compat] {v.python:6} {v.suite:24} sdk: {side(v.sdk)} | package: {side(v.package)}"
        f" | only with the package: {len(v.only_package)}, flaky: {len(v.flaky)},"
        f" logged: {len(v.new_records)} -> {verdict}"
    )


def details(v: Verdict, most: int = 15) -> list[str]:
    """What the progress line counts, by name: at most ``most`` of each kind."""
    lines = []
    for what, tests in (
        ("only with the package", [f"{t}: {v.package.failed[t]}" for t in v.only_package]),
        ("flaky (failed once with the package, passed again)", v.flaky),
        ("fails either way (not counted)", v.either),
        ("failed only without the package (not counted)", v.only_sdk),
    ):
        lines += [f"    {what}: {t}" for t in tests[:most]]
        if len(tests) > most:
            lines.append(f"    {what}: ... and {len(tests) - most} more (summary.json)")
    tolerated = [r for r in v.package.records if r.message in TOLERATED_RECORDS]
    if tolerated:
        lines.append(
            f"    {len(tolerated)} x {tolerated[0].message!r}: "
            f"{TOLERATED_RECORDS[tolerated[0].message]}"
        )
    shown: set[str] = set()
    for r in v.new_records:
        if r.key not in shown:
            shown.add(r.key)
            lines.append(
                f"    logged with the package (pid {r.pid}): {r.logger} {r.level}: "
                f"{r.message[:300]}"
            )
    if not v.ok:
        lines.append(f"    output: {v.package.folder}/output.txt, {v.sdk.folder}/output.txt")
    return lines


def report(v: Verdict) -> None:
    for line in (describe(v), *details(v)):
        print(line, flush=True)


def summary(verdicts: Sequence[Verdict], skipped: Sequence[str]) -> dict[str, object]:
    """What summary.json holds: each suite's verdict and both runs, and what was not run."""

    def run(r: Run) -> dict[str, object]:
        return {
            "tests": r.tests,
            "failed": sorted(r.failed),
            "seconds": round(r.seconds, 1),
            "exit_code": r.exit_code,
            "processes": r.processes,
            "records": [r2._asdict() for r2 in r.records],
        }

    return {
        "suites": [
            {
                "python": v.python,
                "suite": v.suite,
                "ok": v.ok,
                "only_package": list(v.only_package),
                "flaky": list(v.flaky),
                "either": list(v.either),
                "only_sdk": list(v.only_sdk),
                "new_records": [r._asdict() for r in v.new_records],
                "sdk": run(v.sdk),
                "package": run(v.package),
            }
            for v in verdicts
        ],
        "not_run": list(skipped),
    }


# --- the command ---------------------------------------------------------------------


def check_suite(
    python: str, suite: str, runner: Runner, args: argparse.Namespace, folder: Path
) -> Verdict:
    """The suite without the package, then with it, then again what failed only with it."""
    sdk = runner("sdk", folder / "sdk", ())
    package = runner("package", folder / "package", ())
    verdict = compare(python, suite, sdk, package)
    if verdict.only_package and args.confirm:
        # regrtest runs the failed tests again by name; a whole file that failed, or a
        # pytest suite, is run again whole
        match = rerun_names(verdict.only_package) if runner.kind == "cpython" else []
        if any(" [" in t for t in verdict.only_package):
            match = []
        again = (
            runner("sdk", folder / "sdk-again", match),
            runner("package", folder / "package-again", match),
        )
        verdict = compare(python, suite, sdk, package, again)
    return verdict


class Runner:
    """Runs one suite in one mode: (mode, folder, test names to match) -> Run."""

    def __init__(
        self,
        kind: str,
        python: str,
        suite: str,
        args: argparse.Namespace,
        tests_dir: Path | None = None,
        source: Path | None = None,
    ) -> None:
        self.kind, self.python, self.suite, self.args = kind, python, suite, args
        self.tests_dir, self.source = tests_dir, source

    def __call__(self, mode: str, folder: Path, match: Sequence[str]) -> Run:
        if self.kind == "cpython":
            return regrtest(self.python, self.tests_dir, self.suite, mode, folder, self.args, match)
        framework = next(f for f in FRAMEWORKS if f.name == self.suite)
        assert self.source is not None
        return pytest_suite(self.python, self.source, framework, mode, folder, self.args)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="compat.py",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog="Suites: " + ", ".join((*CPYTHON_SUITES, *FRAMEWORK_NAMES)),
    )
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="TAG",
        help="a Python to run (3.10 ... 3.15, 3.13t), or a path; repeatable;"
        " default: every one found",
    )
    parser.add_argument(
        "--suite",
        action="append",
        default=[],
        metavar="NAME",
        help="a suite (a CPython test file or package, or a framework); repeatable; default: all",
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{', '.join(QUICK_SUITES)} on the running Python only"
    )
    parser.add_argument(
        "--frameworks-python",
        default=sys.executable,
        metavar="PATH",
        help="the Python of the framework suites (default: this one)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="regrtest's -j (default 2)")
    parser.add_argument(
        "--timeout",
        type=int,
        default=600,
        help="seconds per test file (regrtest --timeout; default 600)",
    )
    parser.add_argument(
        "--interval-ms", type=int, default=200, help="the readers' export interval (default 200)"
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME",
        help="turn on only this option of the package (repeatable), to find which one a"
        " failure needs; default: every option",
    )
    parser.add_argument(
        "--other-choices",
        action="store_true",
        help="each choice option at its value that is not the default (thread_series_by=name,"
        " ...), instead of its default",
    )
    parser.add_argument(
        "--no-confirm",
        dest="confirm",
        action="store_false",
        help="do not run again what failed only with the package",
    )
    parser.add_argument(
        "--testdir",
        type=Path,
        help="regrtest's --testdir: run the test files of this folder instead",
    )
    parser.add_argument(
        "--no-venv",
        action="store_true",
        help="run CPython's suites with each Python as it is, not in a venv of .cache/compat"
        " (it must import the package and the SDK)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=CACHE / "runs",
        help="where each run's output goes (default .cache/compat/runs)",
    )
    parser.add_argument("--list", action="store_true", help="print what would run, and exit")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()  # the suites run in folders of their own
    if args.testdir:
        args.testdir = args.testdir.resolve()
    return args


def chosen_pythons(args: argparse.Namespace) -> list[Python]:
    found = find_pythons()
    if args.quick:
        running = "{}.{}".format(*sys.version_info[:2])
        return [p for p in found if p.tag == running][:1] or [Python(running, sys.executable)]
    if not args.python:
        return found
    chosen = []
    for want in args.python:
        match = [p for p in found if p.tag == want]
        chosen.append(match[0] if match else Python(Path(want).name, want))
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    # A shell starts a background job with SIGINT ignored, and children inherit that;
    # a handler here gives the suites the default (test_signal sends itself SIGINT).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    suites = args.suite or list(QUICK_SUITES if args.quick else (*CPYTHON_SUITES, *FRAMEWORKS))
    suites = [s.name if isinstance(s, Framework) else s for s in suites]
    pythons = chosen_pythons(args)
    cpython = [s for s in suites if s not in FRAMEWORK_NAMES]
    frameworks = [s for s in suites if s in FRAMEWORK_NAMES]
    if args.list:
        for py in pythons:
            print(f"{py.tag} {py.path}: {' '.join(cpython)}")
        print(f"frameworks on {args.frameworks_python}: {' '.join(frameworks)}")
        return 0
    started = time.monotonic()
    done = Done(args.out)
    run_cpython(args, pythons, cpython, done)
    run_frameworks(args, frameworks, done)
    bad = [v for v in done.verdicts if not v.ok]
    print(
        f"[compat] {len(done.verdicts)} suites in {time.monotonic() - started:.0f} s: "
        f"{len(bad)} with a test that fails only with the package or a package log record; "
        f"{len(done.not_run)} not run; summary in {done.path}",
        flush=True,
    )
    # Under CI, a Python or framework that could not be run fails the job, as in get-pythons.sh.
    return 1 if bad or (done.not_run and os.environ.get("CI") == "true") else 0


class Done:
    """The verdicts so far, and what could not be run, rewritten to summary.json at each."""

    def __init__(self, out: Path) -> None:
        self.path = out / "summary.json"
        self.verdicts: list[Verdict] = []
        self.not_run: list[str] = []
        self.absent: list[str] = []

    def add(self, verdict: Verdict) -> None:
        self.verdicts.append(verdict)
        report(verdict)
        self.save()

    def cannot(self, what: str, why: object) -> None:
        self.not_run.append(f"{what}: {why}")
        print(f"[compat] {what} not run: {why}", flush=True)
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        found = summary(self.verdicts, self.not_run)
        found["absent"] = self.absent
        self.path.write_text(json.dumps(found, indent=1))


def run_cpython(
    args: argparse.Namespace, pythons: Sequence[Python], suites: Sequence[str], done: Done
) -> None:
    for py in pythons if suites else []:
        try:
            venv_python = py.path if args.no_venv else package_venv(py)
            tests_dir = None if args.testdir else cpython_tests(py)
        except (Unavailable, OSError, subprocess.CalledProcessError) as exc:
            done.cannot(py.tag, exc)
            continue
        present = cpython_suites(venv_python, tests_dir, args.testdir)
        done.absent += [f"{py.tag}: {s}" for s in suites if s not in present]
        for suite in (s for s in suites if s in present):
            runner = Runner("cpython", venv_python, suite, args, tests_dir=tests_dir)
            done.add(check_suite(py.tag, suite, runner, args, args.out / py.tag / suite))


def run_frameworks(args: argparse.Namespace, names: Sequence[str], done: Done) -> None:
    tag = probe(args.frameworks_python, "import sys; print('%d.%d' % sys.version_info[:2])")
    for framework in (f for f in FRAMEWORKS if f.name in names):
        try:
            python = framework_venv(framework, args.frameworks_python, str(tag))
            source = framework_source(framework)
        except (Unavailable, OSError, subprocess.CalledProcessError) as exc:
            done.cannot(framework.name, exc)
            continue
        runner = Runner("pytest", python, framework.name, args, source=source)
        folder = args.out / "frameworks" / framework.name
        done.add(check_suite(str(tag), framework.name, runner, args, folder))


if __name__ == "__main__":
    sys.exit(main())
