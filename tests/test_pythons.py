"""The interpreters of ``make pythons`` (scripts/get-pythons.sh) as ordinary Pythons.

docs/pythons.md promises that each cached path runs from this machine: ``PATH -m
venv DIR`` gives a ``DIR/bin/python`` that runs, with the standard library's
extension modules, and no environment reaches child processes. The cache is
read, never filled, here: without it these tests skip (under CI, ``make test``
runs ``make pythons`` first).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("PYTHONS_CACHE_DIR") or ROOT / ".cache" / "pythons")
FOUND = sorted((CACHE / "bin").glob("python3.*")) if (CACHE / "bin").is_dir() else []

PROBE = (
    "import os, sys, ssl, ctypes, zlib, lzma, bz2, sqlite3, decimal, subprocess, sysconfig;"
    "child = subprocess.run(['/bin/sh', '-c', 'echo ${LD_LIBRARY_PATH-unset}'],"
    " capture_output=True, text=True).stdout.strip();"
    "print(sys.prefix != sys.base_prefix, '%d.%d' % sys.version_info[:2],"
    " bool(sysconfig.get_config_var('Py_GIL_DISABLED')),"
    " getattr(sys, '_is_gil_enabled', lambda: True)(), child)"
)


@pytest.mark.skipif(not FOUND, reason=f"no interpreters in {CACHE}/bin (make pythons)")
@pytest.mark.parametrize("python", FOUND, ids=[p.name for p in FOUND])
def test_a_cached_python_makes_a_venv_that_runs_here(python: Path, tmp_path: Path) -> None:
    version = python.name.removeprefix("python")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHON_GIL")}
    subprocess.run(
        [str(python), "-m", "venv", "--without-pip", str(tmp_path / "venv")],
        check=True,
        timeout=120,
        env=env,
    )
    done = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "python"), "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    in_venv, xy, free_threaded, gil, child = done.stdout.split()
    assert in_venv == "True" and xy == version.removesuffix("t")
    assert free_threaded == str(version.endswith("t"))
    assert gil == str(not version.endswith("t"))
    assert child == "unset"  # the interpreter's libraries reach no child process


def _prints(python: Path, code: str) -> str:
    """What ``python -c code`` prints, stripped; it must exit 0."""
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (python, done.stderr[-2000:])
    return done.stdout.strip()


@pytest.mark.skipif(not FOUND, reason=f"no interpreters in {CACHE}/bin (make pythons)")
def test_ensurepip_takes_the_interpreters_own_pip() -> None:
    # Debian's ensurepip reads pip's wheel from WHEEL_PKG_DIR: the root's, not
    # the machine's /usr/share/python-wheels (an older pip for another Python).
    for python in FOUND:
        version = _prints(python, "import ensurepip; print(ensurepip.version())")
        assert int(version.split(".")[0]) >= 24, (python, version)


@pytest.mark.skipif(not FOUND, reason=f"no interpreters in {CACHE}/bin (make pythons)")
def test_the_versions_docs_pythons_names_are_the_cached_ones() -> None:
    """The table of docs/pythons.md names the exact releases `make pythons` installs."""
    page = (ROOT / "docs" / "pythons.md").read_text()
    for python in FOUND:
        release = _prints(python, "import platform; print(platform.python_version())")
        free = python.name.endswith("t")
        named = f"({release}, free-threaded)" if free else f"{release}"
        assert named in page, f"docs/pythons.md does not name {python.name}'s {release}"
